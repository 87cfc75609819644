//! Results: a Markdown table, CSV, JSON, and plots (SVG, and PNG in a build
//! with the `png` feature) of throughput against message size and against
//! target rate, one line per system.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use crate::gen::human;

/// One cell of the matrix for one system.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Row {
    pub system: String,
    /// `forward` (sender → SUT → sink) or `tail` (file → SUT → sink).
    pub case: String,
    /// Target events/s; 0 = as fast as possible.
    pub target_rate: f64,
    pub bytes_per_msg: usize,
    /// Events per frame (0 for the tail case).
    pub msgs_per_call: usize,
    /// Frames (writes) per second the sender made.
    pub calls_per_s: f64,
    pub sent: u64,
    /// Events that arrived at the sink in the measurement window, per second.
    pub achieved_msgs_per_s: f64,
    /// The same in megabits of message payload per second.
    pub achieved_mbps: f64,
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    /// CPU cores the SUT used in the window (local SUT only).
    pub sut_cores: Option<f64>,
    /// Peak RSS of the SUT during the run, MB (local SUT only).
    pub sut_peak_rss_mb: Option<f64>,
    /// Seconds from the end of sending to the last event.
    pub drain_s: f64,
    /// No loss, no duplicates, no errors.
    pub ok: bool,
}

pub const CSV_HEADER: &str = "system,case,target_rate,bytes_per_msg,msgs_per_call,calls_per_s,sent,achieved_msgs_per_s,achieved_mbps,received,lost,duplicates,sut_cores,sut_peak_rss_mb,drain_s,ok";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}")).unwrap_or_default()
}

pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.1},{},{:.1},{:.3},{},{},{},{},{},{:.3},{}",
            csv_field(&r.system),
            r.case,
            r.target_rate,
            r.bytes_per_msg,
            r.msgs_per_call,
            r.calls_per_s,
            r.sent,
            r.achieved_msgs_per_s,
            r.achieved_mbps,
            r.received,
            r.lost,
            r.duplicates,
            opt(r.sut_cores, 3),
            opt(r.sut_peak_rss_mb, 1),
            r.drain_s,
            r.ok
        );
    }
    s
}

fn rate_text(r: f64) -> String {
    if r == 0.0 {
        "max".into()
    } else {
        format!("{r:.0}")
    }
}

/// The classic table, one row per run.
pub fn markdown_table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| system | case | target msg/s | bytes/msg | msg/call | call/s | achieved msg/s | achieved Mbps | lost | dup | SUT cores | SUT RSS MB |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {} | {} | {} | {} |",
            r.system.replace('|', "\\|"),
            r.case,
            rate_text(r.target_rate),
            r.bytes_per_msg,
            if r.msgs_per_call == 0 {
                "-".to_string()
            } else {
                r.msgs_per_call.to_string()
            },
            r.calls_per_s,
            r.achieved_msgs_per_s,
            r.achieved_mbps,
            r.lost,
            r.duplicates,
            opt(r.sut_cores, 2),
            opt(r.sut_peak_rss_mb, 1)
        );
    }
    s
}

/// A line chart: one series per system.
pub struct Plot {
    pub file_stem: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// The plots the rows support: msg/s and Mbps against size (at the highest
/// target rate and the largest batch), and achieved against target rate (at
/// the smallest size and the largest batch).
pub fn plots(rows: &[Row]) -> Vec<Plot> {
    let mut out = Vec::new();
    let fwd: Vec<&Row> = rows.iter().filter(|r| r.case == "forward").collect();
    let systems = {
        let mut v: Vec<String> = Vec::new();
        for r in rows {
            if !v.contains(&r.system) {
                v.push(r.system.clone());
            }
        }
        v
    };
    let key = |r: f64| if r == 0.0 { f64::INFINITY } else { r };
    if !fwd.is_empty() {
        let top_rate = fwd.iter().map(|r| key(r.target_rate)).fold(0.0, f64::max);
        let top_batch = fwd.iter().map(|r| r.msgs_per_call).max().unwrap_or(0);
        let min_size = fwd.iter().map(|r| r.bytes_per_msg).min().unwrap_or(0);
        let by_size = |f: &dyn Fn(&Row) -> f64| {
            per_system(&systems, &fwd, |r| {
                (key(r.target_rate) == top_rate && r.msgs_per_call == top_batch)
                    .then(|| (r.bytes_per_msg as f64, f(r)))
            })
        };
        let rate_label = if top_rate.is_infinite() {
            "as fast as possible".to_string()
        } else {
            format!("target {} msg/s", human(top_rate))
        };
        out.push(Plot {
            file_stem: "throughput_vs_size".into(),
            title: format!("Throughput vs message size ({rate_label}, {top_batch} msg/call)"),
            x_label: "bytes/msg".into(),
            y_label: "achieved msg/s".into(),
            series: by_size(&|r| r.achieved_msgs_per_s),
        });
        out.push(Plot {
            file_stem: "mbps_vs_size".into(),
            title: format!("Payload Mbps vs message size ({rate_label}, {top_batch} msg/call)"),
            x_label: "bytes/msg".into(),
            y_label: "achieved Mbps".into(),
            series: by_size(&|r| r.achieved_mbps),
        });
        let series = per_system(&systems, &fwd, |r| {
            (r.target_rate > 0.0 && r.bytes_per_msg == min_size && r.msgs_per_call == top_batch)
                .then_some((r.target_rate, r.achieved_msgs_per_s))
        });
        if !series.is_empty() {
            out.push(Plot {
                file_stem: "throughput_vs_rate".into(),
                title: format!("Achieved vs target rate ({min_size} B/msg, {top_batch} msg/call)"),
                x_label: "target msg/s".into(),
                y_label: "achieved msg/s".into(),
                series,
            });
        }
    }
    let tail: Vec<&Row> = rows.iter().filter(|r| r.case == "tail").collect();
    if !tail.is_empty() {
        let series = per_system(&systems, &tail, |r| {
            Some((r.bytes_per_msg as f64, r.achieved_msgs_per_s))
        });
        out.push(Plot {
            file_stem: "file_transfer".into(),
            title: "File transfer through tail: lines/s vs line size".into(),
            x_label: "bytes/line".into(),
            y_label: "achieved lines/s".into(),
            series,
        });
    }
    out
}

/// One series per system (in `systems` order): the points `point` gives for
/// that system's rows, sorted by x; systems without points are left out.
fn per_system(
    systems: &[String],
    rows: &[&Row],
    point: impl Fn(&Row) -> Option<(f64, f64)>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    systems
        .iter()
        .map(|sys| {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| &r.system == sys)
                .filter_map(|r| point(r))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (sys.clone(), pts)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect()
}

/// True when this build draws PNG plots (the `png` feature).
pub const PNG: bool = cfg!(feature = "png");

/// Checks that plotters (`ttf` feature: fontconfig and FreeType) finds a
/// sans-serif font, so the PNG plots get their text. SVG plots need no font
/// here: the viewer draws their text.
#[cfg(feature = "png")]
fn ensure_font() -> Result<()> {
    use std::sync::OnceLock;
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let f = FontDesc::new(FontFamily::SansSerif, 16.0, FontStyle::Normal);
        match f.box_size("nagare 123") {
            Ok((w, _)) if w > 0 => Ok(()),
            _ => Err("no font for the plots: install a TrueType font (Debian: fonts-dejavu-core) and fontconfig".into()),
        }
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, p: &Plot) -> Result<()> {
    let e = |x: &dyn std::fmt::Debug| anyhow!("plot {}: {x:?}", p.file_stem);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let xs = p.series.iter().flat_map(|s| s.1.iter().map(|q| q.0));
    let (mut xlo, mut xhi) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    if xlo <= 0.0 || xlo > xhi {
        bail!("plot {}: needs positive x values", p.file_stem);
    }
    xlo /= 1.5;
    xhi *= 1.5;
    let ymax = p
        .series
        .iter()
        .flat_map(|s| s.1.iter().map(|q| q.1))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(&p.title, ("sans-serif", 22))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((xlo..xhi).log_scale(), 0f64..ymax)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(&p.x_label)
        .y_desc(&p.y_label)
        .x_labels(6)
        .x_label_formatter(&|v| human(*v))
        .y_label_formatter(&|v| human(*v))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, pts)) in p.series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(3)))
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 5, c.filled())))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// Writes `<stem>.svg` and, with `png`, `<stem>.png` into `dir`; returns the
/// paths. `png` is an error in a build without the `png` feature.
pub fn write_plot(dir: &Path, p: &Plot, png: bool) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    let svg = dir.join(format!("{}.svg", p.file_stem));
    draw(SVGBackend::new(&svg, (960, 600)).into_drawing_area(), p)?;
    paths.push(svg);
    if png {
        paths.push(write_png(dir, p)?);
    }
    Ok(paths)
}

#[cfg(feature = "png")]
fn write_png(dir: &Path, p: &Plot) -> Result<PathBuf> {
    ensure_font()?;
    let png = dir.join(format!("{}.png", p.file_stem));
    draw(BitMapBackend::new(&png, (960, 600)).into_drawing_area(), p)?;
    Ok(png)
}

#[cfg(not(feature = "png"))]
fn write_png(_dir: &Path, p: &Plot) -> Result<PathBuf> {
    bail!(
        "plot {}: PNG plots need a nagare built with the `png` feature (this one writes SVG only)",
        p.file_stem
    )
}

/// Facts about the machine for the report header.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1048576.0))
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem} memory, Linux")
}

/// Writes results.md, results.csv, results.json and the plots into `dir`.
pub fn write_report(
    dir: &Path,
    title: &str,
    command: &str,
    notes: &[String],
    rows: &[Row],
    png: bool,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut files = Vec::new();
    let csv_path = dir.join("results.csv");
    std::fs::write(&csv_path, csv(rows))?;
    files.push(csv_path);
    let json_path = dir.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(rows)? + "\n")?;
    files.push(json_path);
    let mut md = format!("# {title}\n\n");
    let _ = writeln!(
        md,
        "Produced by `nagare bench` on {} ({}).\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        machine()
    );
    let _ = writeln!(md, "```sh\n{command}\n```\n");
    for n in notes {
        let _ = writeln!(md, "- {n}");
    }
    if !notes.is_empty() {
        md.push('\n');
    }
    md.push_str(&markdown_table(rows));
    md.push('\n');
    let bad: Vec<&Row> = rows.iter().filter(|r| !r.ok).collect();
    if bad.is_empty() {
        md.push_str("Every run was verified by sequence number: no loss, no duplicates.\n\n");
    } else {
        let _ = writeln!(
            md,
            "**{} run(s) failed verification** (lost, duplicated or malformed events): see the lost and dup columns.\n",
            bad.len()
        );
    }
    md.push_str("Columns: *target msg/s* is the sender's pace (max = as fast as possible); *call/s* is frames written per second; *achieved* figures are what the built-in sink received inside the measurement window (after the warmup); Mbps counts message payload bytes; SUT cores and RSS are sampled from /proc when the system under test is a local process.\n\n");
    for p in plots(rows) {
        let paths = write_plot(dir, &p, png)?;
        let _ = writeln!(md, "![{}]({}.svg)\n", p.title, p.file_stem);
        files.extend(paths);
    }
    let md_path = dir.join("results.md");
    std::fs::write(&md_path, md)?;
    files.push(md_path);
    Ok(files)
}
