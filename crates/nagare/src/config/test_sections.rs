//! `[[test]]` tables, for `nagare test`: in the config itself, or in a
//! test file of their own beside it; each is checked against the config's
//! sections.

use std::path::Path;

use nagare_core::plugin::read;
use toml::de::{DeTable, DeValue};

use super::loader::{Loader, Registries};
use super::source::{join, KeySpans};
use super::test_spec::{Names, TestCase, TestSpec};
use super::ConfigError;

/// Reads the `[[test]]` tables of a test file (a file of tests only, beside
/// the config); `names` are the config's sections.
pub fn load_tests(path: &Path, names: &Names) -> Result<Vec<TestCase>, Vec<ConfigError>> {
    let file = path.display().to_string();
    let error = |line, message: String| ConfigError {
        file: file.clone(),
        line,
        key: String::new(),
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![error(0, format!("cannot read the file: {e}"))])?;
    let mut loader = Loader::new(Registries::builtin(), &file, &text);
    let mut table = match DeTable::parse(&text) {
        Ok(r) => r.into_inner(),
        Err(e) => {
            let line = loader.lines.line(e.span().map_or(0, |s| s.start));
            return Err(vec![error(
                line,
                format!("not valid TOML: {}", e.message().trim()),
            )]);
        }
    };
    for key in table.keys() {
        if key.get_ref() != "test" {
            loader.error_at(
                key.span().start,
                key.get_ref(),
                "a test file holds only [[test]] tables (the config is given with -c)",
            );
        }
    }
    let tests = loader.tests(&mut table, names);
    if loader.errors.is_empty() {
        Ok(tests)
    } else {
        Err(loader.errors)
    }
}

impl<'a> Loader<'a> {
    /// Reads and checks the `[[test]]` tables of `root` against `names`.
    pub(super) fn tests(&mut self, root: &mut DeTable<'a>, names: &Names) -> Vec<TestCase> {
        let mut tests = Vec::new();
        for v in self.sections(root, "test") {
            let at = v.span().start;
            if let DeValue::Table(t) = v.get_ref() {
                self.keys = KeySpans::of(t);
            }
            let checked = read::<TestSpec>(v).and_then(|s| Ok(s.check(names)?));
            match checked {
                Ok(t) => tests.push(t),
                Err(e) => {
                    let before = self.errors.len();
                    self.section_error(at, "", e);
                    for e in &mut self.errors[before..] {
                        e.key = join("test", &e.key);
                    }
                }
            }
        }
        tests
    }
}
