// The monitor's status page in a real browser (Debian's headless Chromium,
// driven by playwright-core): it loads without any request off its own
// origin, its graphs draw the live rates, and its table shows the numbers
// of /api/plugins.
//
// Starts target/release/nagare (or $NAGARE_BIN) with a monitor, a forward
// input, a null output and a forward output to a closed port (retries and
// errors), and `nagare gen` as the load.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const ROOT = resolve(import.meta.dirname, "../..");
const BIN = process.env.NAGARE_BIN || join(ROOT, "target/release/nagare");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const WAIT_MS = 30_000;

function skip(reason) {
  if (process.env.NAGARE_TEST_REQUIRE) {
    console.error(`status-page: cannot run (${reason}), and NAGARE_TEST_REQUIRE says every test must run`);
    process.exit(1);
  }
  console.log(`SKIPPED: status-page: ${reason}`);
  process.exit(0);
}

const freePort = () =>
  new Promise((ok) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

async function waitFor(what, cond) {
  const end = Date.now() + WAIT_MS;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch {}
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function plugins(mon) {
  const r = await fetch(`http://127.0.0.1:${mon}/api/plugins`);
  return (await r.json()).plugins;
}

if (!existsSync(BIN)) skip(`no nagare binary at ${BIN} (cargo build --release -p nagare)`);
if (!existsSync(CHROMIUM)) skip(`no Chromium at ${CHROMIUM} (apt-get install chromium)`);

const dir = mkdtempSync(join(tmpdir(), "nagare-status-page-"));
const [mon, port, closed] = [await freePort(), await freePort(), await freePort()];
writeFileSync(
  join(dir, "nagare.toml"),
  `[monitor]
bind = "127.0.0.1:${mon}"

[[input]]
type = "forward"
bind = "127.0.0.1:${port}"

[[output]]
type = "copy"
match = "**"
[[output.store]]
type = "null"
[[output.store]]
type = "forward"
[[output.store.server]]
address = "127.0.0.1:${closed}"
[output.store.buffer]
flush_interval = "100ms"
retry_wait = "100ms"
retry_max_interval = "200ms"
`,
);
const children = [];
const start = (args) => {
  const c = spawn(BIN, args, { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  c.stderr.on("data", (d) => (err += d));
  c.stderrText = () => err;
  children.push(c);
  return c;
};
let browser;
let failed = false;
try {
  const daemon = start(["run", "-c", join(dir, "nagare.toml")]);
  await waitFor("the monitor", async () => (await fetch(`http://127.0.0.1:${mon}/health`)).ok);
  const gen = start(["gen", "--rate", "2000", "--duration", "120s", "--forward", `127.0.0.1:${port}`]);

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const origin = `http://127.0.0.1:${mon}`;
  const elsewhere = [];
  page.on("request", (r) => {
    if (!r.url().startsWith(origin + "/")) elsewhere.push(r.url());
  });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(origin + "/");
  if ((await page.title()) !== "nagare status") throw new Error(`title: ${await page.title()}`);

  // The graphs draw: events/s above 0, and retries (the closed port).
  const drawn = (id) =>
    page.$eval(`#${id}`, (c) => ({ points: +c.dataset.points || 0, max: +c.dataset.max || 0 }));
  // Lines of a few points each (one point per poll after the first).
  const series = (await plugins(mon)).length;
  await waitFor("the events/s graph to draw a rate", async () => {
    const g = await drawn("g-events");
    return g.max > 0 && g.points >= 3 * series;
  });
  await waitFor("the retries graph to draw a rate", async () => (await drawn("g-retries")).max > 0);
  await waitFor("the buffer graph to draw", async () => (await drawn("g-buffer")).points >= 2);
  // And the lines are on the canvas: coloured pixels (the axes and labels are grey).
  // STATUS_PAGE_SCREENSHOT=file.png keeps a picture of the page, for a human.
  if (process.env.STATUS_PAGE_SCREENSHOT) await page.screenshot({ path: process.env.STATUS_PAGE_SCREENSHOT, fullPage: true });
  const inked = await page.$eval("#g-events", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      const [r, g, b, a] = d.slice(i, i + 4);
      if (a > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 60) n++;
    }
    return n;
  });
  if (inked < 10) throw new Error(`events graph: only ${inked} pixels of its line`);
  console.log(`ok: graphs drawn (events/s max ${(await drawn("g-events")).max.toFixed(0)}, ${inked} line pixels)`);

  // Stop the load; once the counters settle the table must show exactly
  // what /api/plugins says (the retrying output keeps counting retries and
  // errors: those are compared within the page's poll of the same moment).
  gen.kill("SIGTERM");
  let api;
  await waitFor("the counters to settle", async () => {
    const a = await plugins(mon);
    await sleep(1500);
    const b = await plugins(mon);
    const same = a.every((p, i) => p.events_in === b[i].events_in && p.events_out === b[i].events_out);
    api = b;
    return same;
  });
  const KEYS = ["events_in", "events_out", "bytes_in", "bytes_out", "buffer_chunks", "dropped_events", "lost_events"];
  await waitFor("the table to match /api/plugins", async () => {
    const shown = await page.$$eval("#plugins tbody tr", (rows) =>
      rows.map((tr) => {
        const o = { name: tr.dataset.plugin };
        for (const td of tr.querySelectorAll("td[data-key]")) o[td.dataset.key] = td.textContent;
        return o;
      }),
    );
    if (shown.length !== api.length) return false;
    return api.every((p, i) => shown[i].name === p.name && KEYS.every((k) => shown[i][k] === String(p[k])));
  });
  const sent = api.find((p) => p.kind === "input").events_in;
  if (sent === 0) throw new Error("no events arrived");
  console.log(`ok: the table matches /api/plugins for ${api.length} plugins (${sent} events in)`);
  if (elsewhere.length) throw new Error(`requests off the monitor: ${elsewhere.join(", ")}`);
  if (pageErrors.length) throw new Error(`page errors: ${pageErrors.join("; ")}`);
  console.log("ok: no request left the monitor's origin, no script errors");

  // The daemon going away shows on the page, which keeps retrying.
  daemon.kill("SIGKILL");
  await waitFor("the page to say it cannot reach the daemon", async () =>
    (await page.textContent("#state")).includes("cannot reach"),
  );
  console.log("ok: an unreachable daemon is shown");
} catch (e) {
  failed = true;
  console.error(`FAIL: status-page: ${e.stack || e}`);
  for (const c of children) if (c.stderrText()) console.error(`--- ${c.spawnargs.join(" ")}:\n${c.stderrText()}`);
} finally {
  if (browser) await browser.close();
  for (const c of children) c.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
