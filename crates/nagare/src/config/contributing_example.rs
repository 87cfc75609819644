//! The example output of docs/contributing.md (docs/contributing/tally.rs),
//! loaded through a config with the built-in outputs beside it and run, so
//! the walk-through stays true. Here, not in outputs/, because it loads a
//! config (config is the layer above the outputs).

#[path = "../../../../docs/contributing/tally.rs"]
mod tally;

use nagare_core::chunk::Chunk;
use nagare_core::output::{output, OutputRegistration};

use super::{parse_with, OutputTarget, Registries};
use crate::outputs::REGISTRY;

#[tokio::test]
async fn the_example_output_loads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tally.txt");
    let mut outputs: Vec<OutputRegistration> = Vec::new();
    outputs.extend(REGISTRY.iter().map(|r| OutputRegistration { ..*r }));
    outputs.push(output::<tally::TallyConfig>());
    let registries = Registries {
        outputs: Vec::leak(outputs),
        ..Registries::builtin()
    };
    let text = format!(
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:0\"\n[[output]]\ntype = \"tally\"\nmatch = \"**\"\npath = \"{}\"\n",
        out.display()
    );
    let cfg = parse_with(&text, "t.toml", registries).unwrap_or_else(|e| panic!("{e:?}"));
    let OutputTarget::One(o) = &cfg.outputs[0].target else {
        panic!("one output")
    };
    let mut entries = Vec::new();
    for i in 0..3u32 {
        nagare_forward::write_entry(&mut entries, nagare_forward::EventTime::new(i, 0), &[0x80]);
    }
    let chunk = Chunk::in_memory([0; 16], "app.web".into(), entries, 3);
    o.write(&chunk).await.unwrap();
    o.write(&chunk).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "app.web 3\napp.web 3\n"
    );
    let bad = text.replace("path = ", "pth = ");
    let e = parse_with(&bad, "t.toml", registries).err().unwrap();
    assert_eq!((e[0].line, e[0].key.as_str()), (7, "pth"), "{e:?}");
}

/// docs/contributing.md shows the example file as it is.
#[test]
fn the_walkthrough_shows_the_example() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/contributing");
    let doc = std::fs::read_to_string(format!("{root}.md")).unwrap();
    let file = std::fs::read_to_string(format!("{root}/tally.rs")).unwrap();
    assert!(
        doc.contains(&format!("```rust\n{file}```")),
        "docs/contributing.md must show docs/contributing/tally.rs in a rust block, unchanged"
    );
}
