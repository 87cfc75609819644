//! `copy`: every event goes to each of its `[[output.store]]` outputs, each
//! with its own buffer (Fluentd's out_copy).

use crate::config::{Section, SectionError};
use crate::plugin::{BuildContext, OutputRegistration};

use super::OutputTarget;

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

fn build(mut section: Section<'_, '_>, cx: &mut BuildContext) -> Result<OutputTarget, SectionError> {
    let stores = section.take_outputs("store", &cx.name)?;
    if stores.iter().any(|s| matches!(s.target, OutputTarget::Copy(_))) {
        return Err(crate::plugin::OptionError::new("store", "a copy output cannot hold another copy").into());
    }
    Ok(OutputTarget::Copy(stores))
}
