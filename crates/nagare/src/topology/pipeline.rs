//! The running pipeline, and reloading it without losing or doubling an
//! event (SIGHUP, `nagare reload`, `POST /api/reload`).
//!
//! A reload reads and builds the new config with the one build path of
//! `nagare check` (no I/O); errors leave the running pipeline untouched.
//! Then each plugin of the new config is matched with the running one of
//! the same name (type and position, "forward#0": see `sections`) and:
//!
//! - an identical section keeps running with its state (buffer and chunks,
//!   tail positions, connections, dedup window, filter state);
//! - an output whose options changed but whose buffer did not keeps its
//!   buffer and chunks, and writes them with the new output from the next
//!   chunk on; so does a file buffer on the same path whatever changed
//!   (its chunks are handed on; new buffer options apply at restart);
//! - an output whose memory buffer (or buffer path) changed gets a new
//!   buffer; the old one stops taking events and flushes what it holds to
//!   its destination, then stops (shutdown waits for it too);
//! - a changed filter is rebuilt (its state starts afresh);
//! - a changed or removed input stops (its connections finish the frames
//!   they sent and close) and the new one starts; a listener on the same
//!   address passes from the old input to the new one without closing
//!   (`net::handover`).
//!
//! The route table is swapped whole (`RouteSwitch`); a batch that started
//! on the old table finishes on it, and the removed buffers are drained only
//! once no batch holds the old table.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nagare_core::metrics::{PluginStats, Registry};
use nagare_core::output::Output;
use nagare_core::pattern::Pattern;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::build;
use super::control::{Control, Outcome, Request, Summary};
use super::sections::{self, Sections};
use crate::buffer::{Buffer, BufferType};
use crate::config::{Config, InputSection, OutputSection, SystemConfig};
use crate::inputs::InputContext;
use crate::router::Stage;
use crate::router::{Outputs, RouteSwitch, Router};
use crate::topology::signals::StopSignals;

/// How long a reload waits for stopped inputs to finish, and for the
/// batches routed by the old table.
const STOP_WAIT: Duration = Duration::from_secs(30);

struct RunningInput {
    name: String,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    stats: Arc<PluginStats>,
}

struct RunningOutput {
    buffer: Arc<Buffer>,
    flushers: Vec<JoinHandle<()>>,
}

impl RunningOutput {
    fn start(buffer: Arc<Buffer>) -> RunningOutput {
        RunningOutput {
            flushers: buffer.start(),
            buffer,
        }
    }
}

/// Filters in file order, with their labels.
type Filters = Vec<(Option<String>, Arc<Stage>)>;
/// Output rules in config order, with their labels.
type LabelledRules = Vec<(Option<String>, Vec<Pattern>, Outputs)>;

/// Everything `nagare run` runs.
pub struct Pipeline {
    reg: Arc<Registry>,
    switch: Arc<RouteSwitch>,
    /// The config file, read again at each reload (None: the embedded default).
    source: Option<PathBuf>,
    sections: Sections,
    system: SystemConfig,
    inputs: Vec<RunningInput>,
    /// Inputs built but not started yet (`start_inputs`).
    pending: Vec<InputSection>,
    filters: Filters,
    outputs: Vec<RunningOutput>,
    /// Outputs a reload removed or replaced, flushing what they still hold.
    retired: Vec<RunningOutput>,
    pub control: Arc<Control>,
}

impl Pipeline {
    /// Opens the outputs' buffers and makes the route table of a built
    /// config (`text`: the file it was built from); `start_inputs` starts
    /// its inputs. Returns the pipeline and the receiving end of reload
    /// requests.
    pub async fn start(
        cfg: Config,
        text: &str,
        source: Option<PathBuf>,
        reg: Arc<Registry>,
    ) -> anyhow::Result<(Pipeline, mpsc::Receiver<Request>)> {
        let (control, requests) =
            Control::new(source.as_ref().map(|p| p.display().to_string()), text);
        let Config {
            system,
            inputs,
            filters,
            outputs,
            warnings,
            ..
        } = cfg;
        for w in warnings {
            tracing::warn!("{w}");
        }
        let labels: Vec<Option<String>> = outputs.iter().map(|o| o.label.clone()).collect();
        let (rules, buffers) = build::open(outputs, &reg)?;
        for b in &buffers {
            b.set_dead_letter_dir(dead_letter_dir(&system));
        }
        let filter_labels: Vec<Option<String>> = filters.iter().map(|f| f.label.clone()).collect();
        let filters: Filters = filter_labels
            .into_iter()
            .zip(build::stages(filters, &reg))
            .collect();
        let router = Router::with_labels(
            labelled(labels, rules),
            filters.clone(),
            system.error_label.as_deref(),
        );
        let mut p = Pipeline {
            switch: RouteSwitch::new(router),
            reg,
            source,
            sections: Sections::of(text),
            system,
            inputs: Vec::new(),
            pending: Vec::new(),
            filters,
            outputs: buffers.into_iter().map(RunningOutput::start).collect(),
            retired: Vec::new(),
            control: Arc::new(control),
        };
        p.pending = inputs;
        Ok((p, requests))
    }

    /// Starts the inputs of the config `start` was given (after the
    /// monitor, so it answers once an input listens).
    pub async fn start_inputs(&mut self) -> anyhow::Result<()> {
        // Chunk ids stored in recovered file-buffer chunks: their senders'
        // resends must be recognised even though the ids never reached a
        // dedup_path.
        let stored_ids = recovered_ids(self.outputs.iter().map(|o| &o.buffer));
        for i in std::mem::take(&mut self.pending) {
            let running = self.start_input_with(i, &stored_ids, None).await?;
            self.inputs.push(running);
        }
        Ok(())
    }

    /// Starts an input, with `stats` (a replaced input's) or new counters.
    async fn start_input_with(
        &self,
        i: InputSection,
        stored_ids: &Arc<Vec<Bytes>>,
        stats: Option<Arc<PluginStats>>,
    ) -> anyhow::Result<RunningInput> {
        let (stop, shutdown) = watch::channel(false);
        let stats = stats.unwrap_or_else(|| self.reg.register("input", &i.name, i.type_name));
        let cx = InputContext {
            stats: stats.clone(),
            name: i.name.clone(),
            // The input routes in its label only.
            router: self.switch.live(i.label.as_deref()),
            stored_ids: stored_ids.clone(),
            shutdown,
        };
        match i.input.start(cx).await {
            Ok(tasks) => Ok(RunningInput {
                name: i.name,
                stop,
                tasks,
                stats,
            }),
            Err(e) => {
                self.reg.remove(&stats);
                Err(e)
            }
        }
    }

    /// Stops the inputs and drains every buffer: the running ones and
    /// those a reload retired that are still flushing (see `shutdown`).
    pub async fn drain(self, signals: &mut StopSignals) -> anyhow::Result<()> {
        let timeout = self
            .system
            .shutdown_timeout
            .map_or(Duration::from_secs(60), |d| d.0);
        let dead_letters = dead_letter_dir(&self.system);
        let mut inputs = Vec::new();
        for i in self.inputs {
            let _ = i.stop.send(true);
            inputs.extend(i.tasks);
        }
        let mut buffers = Vec::new();
        let mut flushers = Vec::new();
        for o in self.outputs.into_iter().chain(self.retired) {
            buffers.push(o.buffer);
            flushers.extend(o.flushers);
        }
        crate::topology::shutdown::drain(inputs, &buffers, flushers, timeout, dead_letters, signals)
            .await
    }

    /// Reads the config file again and applies it (see the module's doc).
    /// The outcome is logged here; the caller answers whoever asked.
    pub async fn reload(&mut self, why: &str) -> Outcome {
        let outcome = self.reload_file().await;
        match &outcome {
            Ok(s) => {
                for w in &s.warnings {
                    tracing::warn!("reload: {w}");
                }
                tracing::info!(hash = %s.hash, kept = s.kept.len(), replaced = ?s.replaced,
                    started = ?s.started, stopped = ?s.stopped, "{why}: configuration reloaded");
            }
            Err(errors) => {
                self.control.failed();
                for e in errors {
                    tracing::error!("{why}: {e}");
                }
                tracing::error!(hash = %self.control.hash(),
                    "{why}: reload failed; the running pipeline is unchanged");
            }
        }
        outcome
    }

    async fn reload_file(&mut self) -> Outcome {
        let Some(path) = self.source.clone() else {
            return Err(vec![
                "nagare runs the embedded default configuration (no -c FILE): nothing to reload"
                    .into(),
            ]);
        };
        let source = crate::config::read_source(&path)
            .map_err(|errors| errors.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
        let (text, file) = (source.text, source.name);
        let cfg = crate::config::parse(&text, &file)
            .map_err(|errors| errors.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
        let new = Sections::of(&text);
        let mut summary = Summary {
            hash: sections::hash(&text),
            warnings: restart_only(&self.system, &cfg.system, &self.sections, &new),
            ..Summary::default()
        };
        for w in &cfg.warnings {
            tracing::warn!("{w}");
        }
        let Config {
            system,
            inputs,
            filters,
            outputs,
            ..
        } = cfg;
        // Outputs first: opening a new buffer is the one step that can fail
        // (a file buffer's directory); until it succeeded nothing changed.
        let labels: Vec<Option<String>> = outputs.iter().map(|o| o.label.clone()).collect();
        let plan = self.plan_outputs(outputs, &new, &mut summary)?;
        let (rules, outputs, retire) = self.apply_outputs(plan);
        let filters = self.next_filters(filters, &new, &mut summary);
        let router = Router::with_labels(
            labelled(labels, rules),
            filters.clone(),
            system.error_label.as_deref(),
        );
        let old_router = self.switch.swap(router);
        for (_, gone) in self
            .filters
            .iter()
            .filter(|(_, s)| !filters.iter().any(|(_, n)| Arc::ptr_eq(s, n)))
        {
            self.reg.remove(&gone.stats);
        }
        self.filters = filters;
        // Only new buffers hold ids not taken yet.
        let stored_ids = recovered_ids(outputs.iter().map(|o| &o.buffer));
        self.outputs = outputs;
        let failed = self
            .restart_inputs(inputs, &new, &stored_ids, &mut summary)
            .await;
        // The removed buffers take no more events once no batch holds the
        // old table; then they flush what they hold and stop.
        wait_unused(old_router).await;
        for r in retire {
            r.buffer.close();
            self.retired.push(r);
        }
        self.forget_drained();
        // `dead_letter_dir` applies at once, to kept buffers too.
        for b in self
            .outputs
            .iter()
            .map(|o| &o.buffer)
            .chain(self.retired.iter().map(|r| &r.buffer))
        {
            b.set_dead_letter_dir(dead_letter_dir(&system));
        }
        self.system = system;
        self.sections = new;
        self.control.loaded(&text);
        if failed.is_empty() {
            Ok(summary)
        } else {
            Err(failed)
        }
    }
}

/// What a reload does with the outputs of the new config.
struct OutputPlan {
    rules: crate::router::Rules,
    /// Every output's buffer in order: running ones kept, and new ones.
    buffers: Vec<Arc<Buffer>>,
    /// Running buffers whose output (and secondary) the new options replace.
    swaps: Vec<Swap>,
}

/// A running buffer, and the output and secondary it goes on with.
struct Swap {
    buffer: Arc<Buffer>,
    output: Arc<dyn Output>,
    secondary: Option<Box<OutputSection>>,
}

/// Which running buffer a new output takes, if any.
enum Choice {
    /// Nothing changed: the running output goes on.
    Keep(usize),
    /// The running buffer goes on with the new output.
    Swap(usize),
    /// A new buffer.
    New,
}

impl Pipeline {
    /// Which running buffer the output `section` takes: the file buffer on
    /// the same path, else the output of the same name if its buffer
    /// options did not change.
    fn choose(&self, section: &OutputSection, new: &Sections, claimed: &[bool]) -> Choice {
        let name = section.name.as_str();
        let (old_text, new_text) = (self.sections.outputs.get(name), new.outputs.get(name));
        let file = match (section.buffer.kind, &section.buffer.path) {
            (BufferType::File, Some(p)) => Some(Path::new(p)),
            _ => None,
        };
        let free = |i: &usize| !claimed[*i];
        let by_path = file.and_then(|p| {
            self.outputs
                .iter()
                .position(|o| o.buffer.dir() == Some(p))
                .filter(free)
        });
        let by_name = || {
            self.outputs
                .iter()
                .position(|o| o.buffer.name() == name)
                .filter(free)
        };
        let same_name = |i: usize| self.outputs[i].buffer.name() == name;
        match by_path {
            Some(i) if same_name(i) && old_text.is_some() && old_text == new_text => {
                Choice::Keep(i)
            }
            Some(i) => Choice::Swap(i),
            None => match (by_name(), old_text, new_text) {
                (Some(i), Some(o), Some(n)) if o == n => Choice::Keep(i),
                (Some(i), Some(o), Some(n)) if o.buffer == n.buffer => Choice::Swap(i),
                _ => Choice::New,
            },
        }
    }

    /// Opens the buffers the new outputs need; on failure closes them again
    /// and changes nothing.
    fn plan_outputs(
        &self,
        sections: Vec<OutputSection>,
        new: &Sections,
        summary: &mut Summary,
    ) -> Result<OutputPlan, Vec<String>> {
        let mut claimed = vec![false; self.outputs.len()];
        let mut swaps = Vec::new();
        let mut opened: Vec<Arc<Buffer>> = Vec::new();
        let reg = &self.reg;
        let planned = build::open_each(sections, |section, output| {
            let name = section.name.clone();
            match self.choose(&section, new, &claimed) {
                Choice::Keep(i) => {
                    claimed[i] = true;
                    summary.kept.push(name);
                    Ok(self.outputs[i].buffer.clone())
                }
                Choice::Swap(i) => {
                    claimed[i] = true;
                    let b = self.outputs[i].buffer.clone();
                    if b.name() != name {
                        summary.warnings.push(format!(
                            "{name} takes over the file buffer of {} on the same path, with its chunks; it keeps that name in logs and metrics until a restart",
                            b.name()
                        ));
                    }
                    let buffer_changed = self.sections.outputs.get(b.name()).map(|t| &t.buffer)
                        != new.outputs.get(&name).map(|t| &t.buffer);
                    if buffer_changed {
                        summary.warnings.push(format!(
                            "{name}: the options of a file buffer on the same path apply at the next restart; its chunks and options are kept"
                        ));
                    }
                    summary.replaced.push(name);
                    swaps.push(Swap {
                        buffer: b.clone(),
                        output,
                        secondary: section.secondary,
                    });
                    Ok(b)
                }
                Choice::New => {
                    let old = self.outputs.iter().position(|o| o.buffer.name() == name);
                    match old {
                        Some(_) => summary.replaced.push(name),
                        None => summary.started.push(name),
                    }
                    // A replaced output's counters go on in the new buffer.
                    let stats = old.map(|i| self.outputs[i].buffer.stats().clone());
                    let b = build::open_buffer_with(section, output, reg, stats)?;
                    opened.push(b.clone());
                    Ok(b)
                }
            }
        });
        match planned {
            Ok((rules, buffers)) => {
                for (i, o) in self.outputs.iter().enumerate() {
                    if !claimed[i] && !buffers.iter().any(|b| b.name() == o.buffer.name()) {
                        summary.stopped.push(o.buffer.name().to_string());
                    }
                }
                Ok(OutputPlan {
                    rules,
                    buffers,
                    swaps,
                })
            }
            Err(e) => {
                for b in opened {
                    b.close();
                    self.forget_stats(&b);
                }
                Err(vec![format!("{e:#}")])
            }
        }
    }

    /// Starts the new outputs, gives the kept buffers their new outputs;
    /// returns the rules, the running outputs in order, and the ones to
    /// retire once no batch holds the old route table.
    fn apply_outputs(
        &mut self,
        plan: OutputPlan,
    ) -> (crate::router::Rules, Vec<RunningOutput>, Vec<RunningOutput>) {
        for Swap {
            buffer: b,
            output,
            secondary,
        } in plan.swaps
        {
            output.attach(b.stats());
            output.start();
            match build::start_secondary(secondary, &self.reg) {
                Ok(secondary) => {
                    if let Some(old) = b.replace_output(output, secondary) {
                        self.reg.remove(&old);
                    }
                }
                Err(e) => tracing::error!(output = %b.name(), "reload: {e:#}"),
            }
        }
        let mut old: Vec<Option<RunningOutput>> = self.outputs.drain(..).map(Some).collect();
        let running = plan
            .buffers
            .into_iter()
            .map(|b| {
                let same = old
                    .iter_mut()
                    .find(|o| o.as_ref().is_some_and(|o| Arc::ptr_eq(&o.buffer, &b)));
                match same.and_then(Option::take) {
                    Some(kept) => kept,
                    None => RunningOutput::start(b),
                }
            })
            .collect();
        (plan.rules, running, old.into_iter().flatten().collect())
    }

    /// The filters of the new config: the running stage when its section
    /// did not change, else a new one (with the old one's counters).
    fn next_filters(
        &self,
        sections: Vec<crate::config::FilterSection>,
        new: &Sections,
        summary: &mut Summary,
    ) -> Filters {
        let next: Filters = sections
            .into_iter()
            .enumerate()
            .map(|(index, f)| {
                let old = self.filters.iter().find(|(_, s)| s.name == f.name);
                let unchanged = new.filters.contains_key(&f.name)
                    && self.sections.filters.get(&f.name) == new.filters.get(&f.name);
                match old {
                    Some((label, stage)) if unchanged => {
                        summary.kept.push(f.name);
                        (label.clone(), stage.clone())
                    }
                    _ => {
                        let stats = match old {
                            Some((_, s)) => {
                                summary.replaced.push(f.name.clone());
                                s.stats.clone()
                            }
                            None => {
                                summary.started.push(f.name.clone());
                                self.reg.register("filter", &f.name, f.type_name)
                            }
                        };
                        let stage = Stage {
                            index,
                            name: f.name,
                            patterns: f.patterns,
                            filter: f.filter,
                            stats,
                        };
                        (f.label, Arc::new(stage))
                    }
                }
            })
            .collect();
        for (_, s) in &self.filters {
            if !next.iter().any(|(_, n)| n.name == s.name) {
                summary.stopped.push(s.name.clone());
                self.reg.remove(&s.stats);
            }
        }
        next
    }

    /// Stops the inputs whose section changed or went, then starts the
    /// new and changed ones (listeners pass from old to new: `handover`).
    /// Returns the inputs that failed to start.
    async fn restart_inputs(
        &mut self,
        sections: Vec<InputSection>,
        new: &Sections,
        stored_ids: &Arc<Vec<Bytes>>,
        summary: &mut Summary,
    ) -> Vec<String> {
        let _handover = crate::net::handover::Handover::begin();
        let unchanged: Vec<bool> = self
            .inputs
            .iter()
            .map(|r| {
                new.inputs.contains_key(&r.name)
                    && self.sections.inputs.get(&r.name) == new.inputs.get(&r.name)
            })
            .collect();
        let mut keep = Vec::new();
        let mut stopping = Vec::new();
        for (r, unchanged) in self.inputs.drain(..).zip(unchanged) {
            if unchanged {
                keep.push(Some(r));
            } else {
                let _ = r.stop.send(true);
                stopping.push(r);
            }
        }
        let mut old_stats = Vec::new();
        for r in stopping {
            let all = async {
                for t in r.tasks {
                    let _ = t.await;
                }
            };
            if tokio::time::timeout(STOP_WAIT, all).await.is_err() {
                tracing::warn!(input = %r.name, "reload: the input did not stop within {}s; going on", STOP_WAIT.as_secs());
            }
            if new.inputs.contains_key(&r.name) {
                old_stats.push(r.stats);
            } else {
                summary.stopped.push(r.name);
                self.reg.remove(&r.stats);
            }
        }
        let mut failed = Vec::new();
        for i in sections {
            let kept = keep
                .iter_mut()
                .find(|k| k.as_ref().is_some_and(|k| k.name == i.name))
                .and_then(Option::take);
            if let Some(k) = kept {
                summary.kept.push(i.name);
                self.inputs.push(k);
                continue;
            }
            let name = i.name.clone();
            // A replaced input's counters go on.
            let stats = old_stats.iter().find(|s| s.name == name).cloned();
            match &stats {
                Some(_) => summary.replaced.push(name.clone()),
                None => summary.started.push(name.clone()),
            }
            match self.start_input_with(i, stored_ids, stats).await {
                Ok(r) => self.inputs.push(r),
                Err(e) => failed.push(format!(
                    "the new configuration is applied, but input {name} did not start: {e:#}"
                )),
            }
        }
        failed
    }

    /// Forgets the retired buffers that delivered everything they held.
    fn forget_drained(&mut self) {
        let (done, left): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retired)
            .into_iter()
            .partition(|r| r.flushers.iter().all(JoinHandle::is_finished));
        self.retired = left;
        for r in done {
            self.forget_stats(&r.buffer);
        }
    }

    /// Removes a buffer's counters from the metrics, unless a running
    /// buffer carries them on.
    fn forget_stats(&self, b: &Buffer) {
        let shared = self
            .outputs
            .iter()
            .any(|o| Arc::ptr_eq(o.buffer.stats(), b.stats()));
        if !shared {
            self.reg.remove(b.stats());
            if let Some(st) = b.secondary_stats() {
                self.reg.remove(&st);
            }
        }
    }
}

/// Waits until no batch holds `old` (the table a reload replaced).
async fn wait_unused(old: Router) {
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    while old.users() > 1 {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("reload: batches routed by the old table did not finish within {}s; draining the removed outputs anyway", STOP_WAIT.as_secs());
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn labelled(labels: Vec<Option<String>>, rules: crate::router::Rules) -> LabelledRules {
    labels
        .into_iter()
        .zip(rules)
        .map(|(l, (p, o))| (l, p, o))
        .collect()
}

/// The senders' chunk ids kept in the chunks the buffers recovered at
/// start, for the inputs' dedup windows.
fn recovered_ids<'a>(buffers: impl Iterator<Item = &'a Arc<Buffer>>) -> Arc<Vec<Bytes>> {
    Arc::new(buffers.flat_map(|b| b.take_recovered_ids()).collect())
}

/// What a reload cannot apply to a running nagare.
fn restart_only(
    old: &SystemConfig,
    new: &SystemConfig,
    old_sections: &Sections,
    new_sections: &Sections,
) -> Vec<String> {
    let process = |s: &SystemConfig| {
        serde_json::to_value((&s.workers, &s.log_level, &s.log_format, &s.log_file))
            .unwrap_or_default()
    };
    let mut w = Vec::new();
    if process(old) != process(new) {
        w.push(
            "[system] workers, log_level, log_format and log_file apply at the next restart".into(),
        );
    }
    if old_sections.monitor != new_sections.monitor {
        w.push("[monitor] applies at the next restart".into());
    }
    w
}

/// `[system] dead_letter_dir`, or its default.
fn dead_letter_dir(system: &SystemConfig) -> PathBuf {
    system.dead_letter_dir.as_ref().map_or_else(
        || std::env::temp_dir().join("nagare-dead-letters"),
        PathBuf::from,
    )
}
