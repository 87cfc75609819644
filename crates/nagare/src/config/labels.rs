//! Labels: the `label` key of a section, and the checks that labels
//! connect (an input's label has an output, a filter's or an output's label
//! is set by an input or is the error label).

use toml::de::DeTable;

use super::loader::Loader;
use super::messages;
use super::ConfigError;

/// A `label` key of a section.
pub(super) struct LabelUse {
    pub(super) name: String,
    /// Byte offset of the value (for the line).
    pub(super) at: usize,
    /// "input", "filter" or "output".
    pub(super) kind: &'static str,
}

impl<'a> Loader<'a> {
    /// Takes `label` (a section's label; `kind` is "input", "filter" or
    /// "output"); None when absent, Err when reported.
    pub(super) fn label(
        &mut self,
        table: &mut DeTable<'a>,
        kind: &'static str,
        section: usize,
    ) -> Result<Option<String>, ()> {
        let Some(v) = table.remove("label") else {
            self.unlabelled.push((section, kind));
            return Ok(None);
        };
        let at = v.span().start;
        match v.get_ref().as_str().filter(|s| !s.trim().is_empty()) {
            Some(name) => {
                self.labels.push(LabelUse {
                    name: name.to_string(),
                    at,
                    kind,
                });
                Ok(Some(name.to_string()))
            }
            None => {
                self.error_at(at, "label", "expected a label name, e.g. label = \"audit\"");
                Err(())
            }
        }
    }

    /// Labels must connect: every label an input sets has an output, and
    /// every label of a filter or output is set by an input (or is the
    /// error label); the error label has an output.
    pub(super) fn check_labels(&mut self) {
        let error = self.error_label.as_ref().map(|(e, _)| e.clone());
        let has = |l: &Self, kind: &str, name: &str| {
            l.labels.iter().any(|u| u.kind == kind && u.name == name)
        };
        let mut found = Vec::new();
        for u in &self.labels {
            match u.kind {
                "input" if !has(self, "output", &u.name) => found.push((
                    u.at,
                    "label",
                    format!(
                        "no [[output]] has label = \"{}\": this input's events would be discarded",
                        u.name
                    ),
                )),
                "filter" | "output"
                    if !has(self, "input", &u.name) && error.as_ref() != Some(&u.name) =>
                {
                    let known = self
                        .labels
                        .iter()
                        .filter(|k| k.kind == "input")
                        .map(|k| k.name.as_str())
                        .chain(error.as_deref());
                    let hint = messages::closest(&u.name, known)
                        .map_or_else(String::new, |k| format!(" Did you mean \"{k}\"?"));
                    found.push((
                        u.at,
                        "label",
                        format!(
                            "no [[input]] has label = \"{}\" (nor is it [system] error_label): this {} would get no events.{hint}",
                            u.name, u.kind
                        ),
                    ));
                }
                _ => {}
            }
        }
        if let Some((e, at)) = &self.error_label {
            if !has(self, "output", e) {
                found.push((
                    *at,
                    "system.error_label",
                    format!("no [[output]] has label = \"{e}\": the events filters fail on would be discarded"),
                ));
            }
        }
        for (at, key, message) in found {
            self.error_at(at, key, message);
        }
        // Every input has a label: sections without one get nothing.
        let inputs_all_labelled = self.labels.iter().any(|u| u.kind == "input")
            && !self.unlabelled.iter().any(|(_, kind)| *kind == "input");
        if inputs_all_labelled {
            for (at, kind) in self.unlabelled.clone() {
                self.warnings.push(ConfigError {
                    file: self.file.to_string(),
                    line: self.lines.line(at),
                    key: String::new(),
                    message: format!(
                        "every [[input]] has a label: this [[{kind}]] without one gets no events"
                    ),
                });
            }
        }
    }
}
