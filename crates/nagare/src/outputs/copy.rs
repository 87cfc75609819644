//! `copy`: every event goes to each of its `[[output.store]]` outputs, each
//! with its own buffer (Fluentd's out_copy).

use nagare_core::output::OutputRegistration;
use nagare_core::plugin::{BuildContext, Built, Section, SectionError};

/// The documented options (the loader reads the stores as output sections).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
pub struct CopyConfig {
    /// `[[output.store]]`: outputs (each with `type`, its options, its own
    /// `[output.store.buffer]`; no `match`) that each receive every event.
    pub store: Vec<serde_json::Value>,
}

pub const REGISTRATION: OutputRegistration = OutputRegistration {
    type_name: "copy",
    doc: "Sends every event to each of its `[[output.store]]` outputs, each with its own buffer (Fluentd's out_copy).",
    schema: || schemars::schema_for!(CopyConfig),
    build,
};

/// The stores go back to the config loader, which builds each as an output
/// section (and refuses a copy among them).
fn build<'a>(
    section: Section<'a>,
    _cx: &mut BuildContext,
) -> Result<Built<'a, std::sync::Arc<dyn nagare_core::output::Output>>, SectionError> {
    Ok(Built::Fanout(section.take_tables("store")?))
}
