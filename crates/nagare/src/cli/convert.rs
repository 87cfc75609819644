//! `nagare convert [-o OUT] FILE`: writes the nagare TOML of a Fluentd or
//! Fluent Bit config (stdout without -o) and lists on stderr, as
//! `file:line: kind: what: why`, every approximation and everything left
//! out. Exit 0: complete; 3: something was left out (see the notes); 2: the
//! file could not be read (docs/migration.md).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::convert::{self, Dialect};

#[derive(clap::Args)]
pub struct ConvertArgs {
    /// The Fluentd config (fluent.conf), Fluent Bit classic config
    /// (fluent-bit.conf) or Fluent Bit YAML config (fluent-bit.yaml).
    pub file: PathBuf,
    /// Write the TOML here instead of to stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Read the file as this dialect instead of telling it by its name and content.
    #[arg(long, value_parser = ["fluentd", "fluent-bit", "fluent-bit-yaml"])]
    pub from: Option<String>,
}

pub fn main(a: ConvertArgs) -> ExitCode {
    let dialect = match a.from.as_deref() {
        Some("fluentd") => Dialect::Fluentd,
        Some("fluent-bit") => Dialect::FluentBit,
        Some("fluent-bit-yaml") => Dialect::FluentBitYaml,
        _ => {
            let text = match std::fs::read_to_string(&a.file) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {}: cannot read the file: {e}", a.file.display());
                    return ExitCode::from(convert::EXIT_PARSE);
                }
            };
            match convert::detect(&a.file, &text) {
                Some(d) => d,
                None => {
                    eprintln!(
                        "error: {}: not a Fluentd or Fluent Bit config (no <source>/<match>, [INPUT]/[OUTPUT] or pipeline:); use --from to say which",
                        a.file.display()
                    );
                    return ExitCode::from(convert::EXIT_PARSE);
                }
            }
        }
    };
    let converted = match convert::convert_file(&a.file, dialect) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(convert::EXIT_PARSE);
        }
    };
    for n in &converted.notes {
        eprintln!("{n}");
    }
    match &a.output {
        Some(out) => {
            if let Err(e) = std::fs::write(out, &converted.toml) {
                eprintln!("error: {}: cannot write: {e}", out.display());
                return ExitCode::from(super::EXIT_RUNTIME);
            }
        }
        None => print!("{}", converted.toml),
    }
    let left_out = converted
        .notes
        .iter()
        .filter(|n| n.kind == convert::NoteKind::Unmapped)
        .count();
    let approx = converted.notes.len() - left_out;
    eprintln!(
        "{}: converted from {dialect}: {approx} approximations, {left_out} things left out{}",
        a.file.display(),
        if left_out > 0 { " (exit 3)" } else { "" }
    );
    ExitCode::from(converted.exit_code())
}
