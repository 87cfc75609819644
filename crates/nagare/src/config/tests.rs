use super::*;

/// The errors of a config that must not load.
fn errors(text: &str, file: &str) -> Vec<ConfigError> {
    match parse(text, file) {
        Ok(_) => panic!("{file} loaded, but errors were expected:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn default_config_parses() {
    let c = parse(DEFAULT_CONFIG, "default").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.inputs.len(), 1);
    assert_eq!(c.outputs.len(), 1);
    assert_eq!(c.monitor.unwrap().bind, "127.0.0.1:24220");
}

#[test]
fn every_example_config_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("examples/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "toml") {
            load(&p).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 4, "expected the example configs, found {n}");
}

#[test]
fn errors_name_file_line_and_key() {
    let text = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\nbnd = 3\n";
    let e = errors(text, "x.toml");
    assert_eq!(e[0].file, "x.toml");
    assert_eq!(e[0].line, 4);
    assert_eq!(e[0].key, "bnd");

    let text = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n[output.buffer]\nflush_interval = \"soon\"\n";
    let e = errors(text, "y.toml");
    assert_eq!(e[0].line, 9, "{e:?}");
    assert!(e[0].key.ends_with("flush_interval"), "{e:?}");
    assert!(e[0].message.contains("duration"), "{e:?}");

    let text = "[[input]]\ntype = \"forward\"\nbind = \"${NAGARE_TEST_UNSET_VAR}\"\n";
    let e = errors(text, "v.toml");
    assert_eq!(e[0].line, 3, "{e:?}");
    assert!(e[0].message.contains("NAGARE_TEST_UNSET_VAR"), "{e:?}");

    let text =
        "[[input]]\ntype = \"tail\"\npath = \"/x\"\ntag = \"t\"\n[input.parser]\ntype = \"nope\"\n";
    let e = errors(text, "p.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (6, "parser.type"), "{e:?}");

    let text = "[[input]]\ntype = \"tail\"\npath = \"/x\"\ntag = \"t\"\n[input.parser]\ntype = \"regex\"\nexpression = \"(unclosed\"\n";
    let e = errors(text, "r.toml");
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (7, "parser.expression"),
        "{e:?}"
    );

    let text = "[[input]]\ntype = \"nope\"\n";
    let e = errors(text, "z.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (2, "type"));
}

#[test]
fn filter_sections() {
    let input = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\n";
    let ok = format!("{input}[[filter]]\ntype = \"parser\"\nkey_name = \"log\"\n[filter.parser]\ntype = \"json\"\n[[filter]]\ntype = \"parser\"\nmatch = \"a.* b\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"apache2\"\n");
    let c = parse(&ok, "f.toml").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.filters.len(), 2);
    assert_eq!(
        (c.filters[0].name.as_str(), c.filters[0].patterns.len()),
        ("parser#0", 1)
    );
    assert_eq!(
        (c.filters[1].name.as_str(), c.filters[1].patterns.len()),
        ("parser#1", 2)
    );
    let cases = [
        // (section after the input, line, key)
        ("[[filter]]\ntype = \"nope\"\n", 5, "type"),
        ("[[filter]]\ntype = \"parser\"\n[filter.parser]\ntype = \"json\"\n", 4, "key_name"),
        ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\nkey_nam = 1\n[filter.parser]\n", 7, "key_nam"),
        ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n", 4, "parser"),
        ("[[filter]]\ntype = \"parser\"\nmatch = \"a.{b\"\nkey_name = \"m\"\n[filter.parser]\n", 6, "match"),
        ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"bogus\"\n", 8, "parser.type"),
        ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"multiline\"\nformat_firstline = \"^x\"\n", 8, "parser.type"),
        ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"regex\"\nexpression = \"(x\"\n", 9, "parser.expression"),
    ];
    for (section, line, key) in cases {
        let e = errors(&format!("{input}{section}"), "f.toml");
        assert_eq!(
            (e[0].line, e[0].key.as_str()),
            (line, key),
            "{section}: {e:?}"
        );
    }
}

#[test]
fn an_error_is_placed_in_its_own_section() {
    // Both outputs have `path`; the error is the first one's, on its line.
    let text = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:0\"\n\n[[output]]\ntype = \"file\"\nmatch = \"a\"\npath = \"/tmp/%Q\"\n\n[[output]]\ntype = \"file\"\nmatch = \"**\"\npath = \"/tmp/ok.log\"\n";
    let e = errors(text, "s.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (8, "path"), "{e:?}");
    // A key missing in the first section is reported there, not where a
    // later section has it.
    let text = "[[input]]\ntype = \"tail\"\ntag = \"t\"\n\n[[input]]\ntype = \"tail\"\npath = \"/x\"\ntag = \"t\"\n";
    let e = errors(text, "m.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (1, "path"), "{e:?}");
}

#[test]
fn unknown_sections_and_types_suggest_the_closest() {
    let e = errors("[[inputs]]\ntype = \"forward\"\n", "u.toml");
    assert!(e[0].message.contains("Did you mean `input`?"), "{e:?}");
    let e = errors("[[input]]\ntype = \"forwrd\"\n", "u.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (2, "type"), "{e:?}");
    assert!(e[0].message.contains("Did you mean \"forward\"?"), "{e:?}");
}

#[test]
fn a_buffer_option_among_output_options_is_pointed_to_the_buffer() {
    let text = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:0\"\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\nflush_interval = \"1s\"\n";
    let e = errors(text, "b.toml");
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (7, "flush_interval"),
        "{e:?}"
    );
    assert!(
        e[0].message.contains("put it under [output.buffer]"),
        "{e:?}"
    );
}

const TWO_INPUTS: &str = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\n[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:2\"\nlabel = \"audit\"\n";

#[test]
fn labels_must_connect_inputs_to_outputs() {
    let ok = format!("{TWO_INPUTS}[[output]]\ntype = \"null\"\nmatch = \"**\"\n[[output]]\ntype = \"null\"\nmatch = \"**\"\nlabel = \"audit\"\n");
    let c = parse(&ok, "ok.toml").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.inputs[1].label.as_deref(), Some("audit"));
    assert_eq!(c.outputs[1].label.as_deref(), Some("audit"));
    // An input label no output has: its events would be discarded.
    let text = format!("{TWO_INPUTS}[[output]]\ntype = \"null\"\nmatch = \"**\"\n");
    let e = errors(&text, "a.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (7, "label"), "{e:?}");
    assert!(
        e[0].message.contains("no [[output]] has label = \"audit\""),
        "{e:?}"
    );
    // An output or filter label no input sets (a typo): named, with a hint.
    let text = format!("{ok}[[filter]]\ntype = \"grep\"\nlabel = \"audt\"\n[[filter.exclude]]\nkey = \"a\"\npattern = \"b\"\n");
    let e = errors(&text, "b.toml");
    assert_eq!((e[0].line, e[0].key.as_str()), (17, "label"), "{e:?}");
    assert!(e[0].message.contains("Did you mean \"audit\"?"), "{e:?}");
    // The error label needs an output; a label is a non-empty string.
    let e = errors(
        &format!("[system]\nerror_label = \"errors\"\n{ok}"),
        "c.toml",
    );
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (2, "system.error_label"),
        "{e:?}"
    );
    let e = errors(
        &ok.replace("label = \"audit\"\n[[output]]", "label = 3\n[[output]]"),
        "d.toml",
    );
    assert_eq!((e[0].line, e[0].key.as_str()), (7, "label"), "{e:?}");
    // Every input labelled: a section without a label gets nothing (a warning).
    let text = format!("{}[[output]]\ntype = \"null\"\nmatch = \"**\"\nlabel = \"audit\"\n[[output]]\ntype = \"null\"\nmatch = \"**\"\n", TWO_INPUTS.replacen("bind = \"127.0.0.1:1\"\n", "bind = \"127.0.0.1:1\"\nlabel = \"audit\"\n", 1));
    let c = parse(&text, "w.toml").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert_eq!(c.warnings[0].line, 13, "{:?}", c.warnings);
    assert!(
        c.warnings[0]
            .message
            .contains("every [[input]] has a label"),
        "{:?}",
        c.warnings
    );
    // Only a top-level output takes a label.
    let text = ok.replace("type = \"null\"\nmatch = \"**\"\nlabel = \"audit\"\n", "type = \"copy\"\nmatch = \"**\"\nlabel = \"audit\"\n[[output.store]]\ntype = \"null\"\nlabel = \"x\"\n");
    let e = errors(&text, "e.toml");
    assert_eq!(e[0].key, "store[0].label", "{e:?}");
}

#[test]
fn test_tables_are_checked_with_the_config() {
    let base = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\n[[output]]\ntype = \"null\"\nmatch = \"**\"\n";
    let test = |expect: &str| {
        format!("{base}[[test]]\nname = \"t\"\n[[test.input]]\ntag = \"a\"\nrecords = [{{ x = 1 }}]\n[[test.expect]]\n{expect}")
    };
    let c = parse(&test("output = \"null#0\"\ncount = 1\n"), "ok.toml")
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.tests.len(), 1);
    let e = errors(
        &test("output = \"null#0\"\nmatches = { x = \"(\" }\n"),
        "re.toml",
    );
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (14, "test.expect[0].matches.x"),
        "{e:?}"
    );
    let e = errors(&test("output = \"nul#0\"\n"), "name.toml");
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (13, "test.expect[0].output"),
        "{e:?}"
    );
    assert!(e[0].message.contains("Did you mean \"null#0\"?"), "{e:?}");
    let e = errors(&test("output = \"null#0\"\ncont = 1\n"), "key.toml");
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (14, "test.expect[0].cont"),
        "{e:?}"
    );
}

/// Options a group appends (`nagare_core::option_group!`: a Redis or Kafka
/// connection, an HTTP listener, the keys of every parser) keep their line
/// and their key like the plugin's own, and unknown keys next to them are
/// still denied.
#[test]
fn option_groups_keep_lines_and_keys() {
    for (text, line, key) in [
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\n\nmaster_name = 3\n", 6, "master_name"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\nmaster_nam = \"m\"\n", 5, "master_nam"),
        ("[[input]]\ntype = \"kafka\"\ntopics = [\"t\"]\naddresses = \"x\"\n", 4, "addresses"),
        ("[[input]]\ntype = \"http\"\nbind = \"127.0.0.1:1\"\nheader_timeout = \"soon\"\n", 4, "header_timeout"),
        ("[[input]]\ntype = \"http\"\nbind = \"127.0.0.1:1\"\nmax_conections = 3\n", 4, "max_conections"),
        ("[[input]]\ntype = \"tail\"\npath = \"/x\"\ntag = \"t\"\n[input.parser]\ntype = \"json\"\nmesage_key = \"m\"\n", 7, "parser.mesage_key"),
    ] {
        let e = errors(text, "g.toml");
        assert_eq!((e[0].line, e[0].key.as_str()), (line, key), "{e:?}\n{text}");
    }
}
