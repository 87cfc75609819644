//! `nagare plugins`: the plugin types this binary has, from the registries.

use std::io::Write;
use std::process::ExitCode;

use nagare_core::plugin::Registration;

use crate::{filters, inputs, outputs};

#[derive(clap::Args)]
pub struct PluginsArgs {
    /// Print each plugin's options as JSON Schema (for editors and tools).
    #[arg(long)]
    pub schema: bool,
}

pub fn main(a: PluginsArgs) -> ExitCode {
    if a.schema {
        let mut all = serde_json::Map::new();
        schemas(&mut all, "input", inputs::REGISTRY);
        schemas(&mut all, "filter", filters::REGISTRY);
        schemas(&mut all, "output", outputs::REGISTRY);
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = writeln!(std::io::stdout(), "{}", serde_json::Value::Object(all));
        return ExitCode::SUCCESS;
    }
    list("inputs", inputs::REGISTRY);
    list("filters", filters::REGISTRY);
    list("outputs", outputs::REGISTRY);
    println!("Options of each: docs/configuration.md");
    ExitCode::SUCCESS
}

fn list<B>(kind: &str, registry: &[Registration<B>]) {
    println!("{kind}:");
    for r in registry {
        let first = r
            .doc
            .split(". ")
            .next()
            .unwrap_or(r.doc)
            .trim_end_matches('.');
        println!("  {:<10} {first}.", r.type_name);
    }
    println!();
}

/// `"input.forward": {schema}` for each plugin of a registry.
fn schemas<B>(
    all: &mut serde_json::Map<String, serde_json::Value>,
    kind: &str,
    registry: &[Registration<B>],
) {
    for r in registry {
        all.insert(
            format!("{kind}.{}", r.type_name),
            (r.schema)().as_value().clone(),
        );
    }
}
