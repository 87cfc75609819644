//! The conversion of small configs of each dialect, checked by the TOML it
//! writes being what nagare's loader accepts and by its notes.

use std::path::Path;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn tmp() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "nagare-convert-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn detects_dialects() {
    assert_eq!(
        detect(Path::new("a.conf"), "# x\n<source>\n"),
        Some(Dialect::Fluentd)
    );
    assert_eq!(
        detect(Path::new("a.conf"), "@include x.conf\n"),
        Some(Dialect::Fluentd)
    );
    assert_eq!(
        detect(Path::new("a.conf"), "[SERVICE]\n  Flush 1\n"),
        Some(Dialect::FluentBit)
    );
    assert_eq!(
        detect(Path::new("a.conf"), "@SET a=b\n"),
        Some(Dialect::FluentBit)
    );
    assert_eq!(
        detect(Path::new("a.yaml"), "pipeline:\n"),
        Some(Dialect::FluentBitYaml)
    );
    assert_eq!(
        detect(Path::new("a.conf"), "[[input]]\ntype = \"tail\"\n"),
        None
    );
    assert_eq!(detect(Path::new("a.conf"), "[system]\n"), None);
    assert_eq!(detect(Path::new("a.toml"), "<source>\n"), None);
}

#[test]
fn fluentd_parse_errors_name_file_and_line() {
    let d = tmp();
    let p = write(&d, "f.conf", "<source>\n  @type forward\n</match>\n");
    let e = convert_file(&p, Dialect::Fluentd).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("closes <source>"), "{e}");
    let p = write(&d, "g.conf", "<source>\n  @type forward\n");
    let e = convert_file(&p, Dialect::Fluentd).unwrap_err();
    assert!(e.message.contains("not closed"), "{e}");
    let p = write(&d, "h.conf", "@include missing.conf\n");
    let e = convert_file(&p, Dialect::Fluentd).unwrap_err();
    assert_eq!(e.line, 1, "{e}");
}

#[test]
fn fluentd_forward_env_and_unknown_plugins() {
    let d = tmp();
    let p = write(
        &d,
        "f.conf",
        r##"<source>
  @type forward
  port "#{ENV['FWD_PORT'] || '24230'}"
  bind 127.0.0.1
  <security>
    self_hostname relay
    shared_key "#{ENV['KEY']}"
  </security>
</source>
<match db.**>
  @type mongo
  host db
</match>
<match **>
  @type forward
  <server>
    host 10.0.0.1
    port 24224
  </server>
  <buffer>
    @type file
    path /tmp/nagare-convert-buf
    chunk_limit_size 8m
    flush_interval 5s
    overflow_action throw_exception
  </buffer>
</match>
"##,
    );
    let c = convert_file(&p, Dialect::Fluentd).unwrap();
    assert!(
        c.toml.contains("bind = '127.0.0.1:${FWD_PORT:-24230}'") || c.toml.contains("127.0.0.1:"),
        "{}",
        c.toml
    );
    assert!(c.toml.contains("shared_key = '${KEY}'"), "{}", c.toml);
    assert!(c.toml.contains("address = '10.0.0.1:24224'"), "{}", c.toml);
    assert!(c.toml.contains("chunk_limit_size = '8MiB'"), "{}", c.toml);
    assert!(c.toml.contains("overflow_action = 'throw'"), "{}", c.toml);
    assert!(c.incomplete());
    let es = c.notes.iter().find(|n| n.what.contains("mongo")).unwrap();
    assert_eq!(es.line, 10);
    assert!(c.toml.contains("# not converted:"), "{}", c.toml);
}
