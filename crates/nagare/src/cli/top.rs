//! `nagare top`: a live terminal view of a running daemon, from its
//! monitor's `/api/plugins`, sampled every `--interval`. What the table
//! holds and how it sorts is in top_table.rs; this file draws it and reads
//! the keys.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

use super::monitor_client::{self, MonitorArgs};
use super::top_table::{fitting, Column, Counters, View};

#[derive(clap::Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub monitor: MonitorArgs,
    /// Time between two samples (rates are the counters' change over it).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
}

/// How long one sample may take before the daemon counts as unreachable.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn main(a: TopArgs) -> ExitCode {
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(super::EXIT_RUNTIME)
        }
    }
}

fn run(a: TopArgs) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let interval = a.interval.max(Duration::from_millis(100));
    let mut view = View::new(a.monitor.monitor.clone());
    // Restores the terminal on a panic too (ratatui's hook).
    let mut terminal = ratatui::try_init().map_err(|e| format!("cannot use the terminal: {e}"))?;
    let result = event_loop(&mut terminal, &rt, &mut view, interval);
    ratatui::restore();
    result.map_err(|e| format!("terminal: {e}"))
}

/// Samples, draws and reads keys until `q`.
fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    rt: &tokio::runtime::Runtime,
    view: &mut View,
    interval: Duration,
) -> std::io::Result<()> {
    let mut next_sample = Instant::now();
    loop {
        if Instant::now() >= next_sample {
            let at = Instant::now();
            view.update(rt.block_on(sample(&view.addr)), at);
            next_sample = at + interval;
        }
        terminal.draw(|f| draw(f, view, interval))?;
        let wait = next_sample.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                        return Ok(())
                    }
                    KeyCode::Char('s') => view.sort.next(),
                    KeyCode::Char('r') => view.sort.reversed = !view.sort.reversed,
                    _ => {}
                }
            }
        }
    }
}

async fn sample(addr: &str) -> Result<Vec<Counters>, String> {
    let v = tokio::time::timeout(
        SAMPLE_TIMEOUT,
        monitor_client::get_json(addr, "/api/plugins"),
    )
    .await
    .map_err(|_| format!("the monitor at {addr} did not answer within {SAMPLE_TIMEOUT:?}"))??;
    Counters::parse_all(&v)
}

fn draw(f: &mut Frame, view: &View, interval: Duration) {
    let [title, status, table, footer] = Layout::vertical([
        Constraint::Length(1),
        // Two lines: an error's reason wraps.
        Constraint::Length(2),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let rows = view.sorted();
    let total_in: f64 = rows
        .iter()
        .filter(|r| r.now.kind == "input")
        .map(|r| r.in_rate)
        .sum();
    f.render_widget(
        Line::from(format!(
            "nagare top - {} - {} plugins - inputs {} events/s",
            view.addr,
            rows.len(),
            super::top_table::si(total_in)
        ))
        .bold(),
        title,
    );
    let status_line = match (&view.error, view.updated) {
        (Some(e), _) => Line::from(format!("retrying every {interval:?}: {e}"))
            .red()
            .bold(),
        (None, Some(t)) => Line::from(format!(
            "updated {}, every {interval:?}",
            t.format("%H:%M:%S")
        )),
        (None, None) => Line::from(format!("connecting to {}...", view.addr)),
    };
    f.render_widget(
        Paragraph::new(status_line).wrap(Wrap { trim: true }),
        status,
    );

    let cols = fitting(table.width);
    let widths = cols.iter().map(|c| match c {
        Column::Plugin => Constraint::Min(c.width()),
        _ => Constraint::Length(c.width()),
    });
    let cell = |c: &Column, text: String| {
        if matches!(c, Column::Plugin | Column::Kind | Column::Type) {
            Cell::from(text)
        } else {
            Cell::from(Text::from(text).right_aligned())
        }
    };
    let header = Row::new(cols.iter().map(|c| {
        let style = if view.sort.by == Some(*c) {
            Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        cell(c, c.title().to_string()).style(style)
    }));
    let shown = table.height.saturating_sub(1) as usize;
    let body = rows
        .iter()
        .take(shown)
        .map(|r| Row::new(cols.iter().map(|c| cell(c, c.cell(r)))));
    f.render_widget(
        Table::new(body, widths).header(header).column_spacing(1),
        table,
    );
    let more = rows.len().saturating_sub(shown);
    let more = if more > 0 {
        format!("  (+{more} more rows)")
    } else {
        String::new()
    };
    f.render_widget(
        Line::from(format!(
            " q quit  s sort: {}  r reverse{more}",
            view.sort.label()
        ))
        .reversed(),
        footer,
    );
}
