//! Field generators and line layouts.

use nagare_bench::gen::fields::{now_nanos, FieldGen, FieldSpec, NumFmt, Rng};
use nagare_bench::gen::{GenFile, GenPlan, Layout, LineGen};

fn spec(toml_text: &str) -> FieldSpec {
    toml::from_str(toml_text).unwrap()
}

fn gen_values(s: &FieldSpec, n: u64) -> Vec<String> {
    let mut g = FieldGen::compile(s).unwrap();
    let mut rng = Rng::new(7);
    let now = now_nanos();
    (0..n)
        .map(|i| {
            let mut out = Vec::new();
            g.write(i, now, &mut rng, false, &mut out);
            String::from_utf8(out).unwrap()
        })
        .collect()
}

#[test]
fn integer_range_is_inclusive_and_covers_both_ends() {
    let v = gen_values(&spec("name='n'\ntype='integer'\nrange=[-3, 3]"), 5000);
    let nums: Vec<i64> = v.iter().map(|s| s.parse().unwrap()).collect();
    assert!(nums.iter().all(|n| (-3..=3).contains(n)));
    for want in -3..=3 {
        assert!(nums.contains(&want), "{want} never drawn");
    }
}

#[test]
fn countup_formats_and_starts_at_value() {
    let v = gen_values(
        &spec("name='id'\ntype='integer'\ncountup=true\nformat='%04d'"),
        3,
    );
    assert_eq!(v, ["0000", "0001", "0002"]);
    let v = gen_values(
        &spec("name='id'\ntype='integer'\ncountup=true\nvalue=98\nformat='id-%d!'"),
        3,
    );
    assert_eq!(v, ["id-98!", "id-99!", "id-100!"]);
}

#[test]
fn printf_subset() {
    let f = |fmt: &str, v: i64| {
        let mut o = Vec::new();
        NumFmt::parse(fmt, b"diuxXob").unwrap().write_int(v, &mut o);
        String::from_utf8(o).unwrap()
    };
    assert_eq!(f("%5d", 42), "   42");
    assert_eq!(f("%-5d|", 42), "42   |");
    assert_eq!(f("%05d", -42), "-0042");
    assert_eq!(f("%+d", 7), "+7");
    assert_eq!(f("%x", 255), "ff");
    assert_eq!(f("%X", 255), "FF");
    assert_eq!(f("%o", 8), "10");
    assert_eq!(f("100%% %d", 1), "100% 1");
    let g = |fmt: &str, v: f64| {
        let mut o = Vec::new();
        NumFmt::parse(fmt, b"f").unwrap().write_float(v, &mut o);
        String::from_utf8(o).unwrap()
    };
    assert_eq!(g("%.2f", 1.23456), "1.23");
    assert_eq!(g("%.0f", 2.5), "3");
    assert_eq!(g("%8.3f", -1.5), "  -1.500");
    assert_eq!(g("%.3f", 0.0004), "0.000");
    assert_eq!(g("%.1f", -0.04), "0.0");
    assert_eq!(g("%.2f", 1e20), "100000000000000000000.00");
    assert!(NumFmt::parse("%q", b"d").is_err());
    assert!(NumFmt::parse("%d %d", b"d").is_err());
    assert!(NumFmt::parse("no conversion", b"d").is_err());
}

#[test]
fn float_range_and_format() {
    let v = gen_values(
        &spec("name='t'\ntype='float'\nrange=[0.1, 5.0]\nformat='%.2f'"),
        5000,
    );
    let mut lo = f64::MAX;
    let mut hi = f64::MIN;
    for s in &v {
        let (_, frac) = s.split_once('.').unwrap();
        assert_eq!(frac.len(), 2, "{s}");
        let x: f64 = s.parse().unwrap();
        assert!((0.1..=5.0).contains(&x), "{x}");
        lo = lo.min(x);
        hi = hi.max(x);
    }
    assert!(lo < 0.3 && hi > 4.8, "spread {lo}..{hi}");
}

#[test]
fn string_any_is_uniform() {
    let v = gen_values(
        &spec("name='l'\ntype='string'\nany=['A','B','C','D']"),
        40_000,
    );
    for want in ["A", "B", "C", "D"] {
        let n = v.iter().filter(|s| *s == want).count();
        // 10,000 expected; 5 sigma is about 430.
        assert!((9_400..10_600).contains(&n), "{want}: {n}");
    }
}

#[test]
fn weighted_any_follows_weights() {
    let v = gen_values(
        &spec("name='l'\ntype='string'\nany=['x','y','z']\nweights=[70, 20, 10]"),
        50_000,
    );
    let share = |w: &str| v.iter().filter(|s| *s == w).count() as f64 / v.len() as f64;
    assert!((share("x") - 0.7).abs() < 0.015, "{}", share("x"));
    assert!((share("y") - 0.2).abs() < 0.015, "{}", share("y"));
    assert!((share("z") - 0.1).abs() < 0.015, "{}", share("z"));
    let zero = gen_values(
        &spec("name='l'\ntype='string'\nany=['x','y']\nweights=[0, 1]"),
        1000,
    );
    assert!(zero.iter().all(|s| s == "y"));
    assert!(
        FieldGen::compile(&spec("name='l'\ntype='string'\nany=['x','y']\nweights=[1]")).is_err()
    );
}

#[test]
fn random_string_length_and_charset() {
    let v = gen_values(&spec("name='f'\ntype='string'\nlength=8"), 1000);
    assert!(v
        .iter()
        .all(|s| s.len() == 8 && s.bytes().all(|c| c.is_ascii_alphanumeric())));
    let distinct: std::collections::HashSet<_> = v.iter().collect();
    assert!(distinct.len() > 990);
    let long = gen_values(&spec("name='f'\ntype='string'\nlength=37"), 10);
    assert!(long.iter().all(|s| s.len() == 37));
}

#[test]
fn datetime_now_format_and_random_range() {
    let v = gen_values(
        &spec("name='t'\ntype='datetime'\nformat='%Y-%m-%dT%H:%M:%S'\nutc=true"),
        1,
    );
    let t = chrono::NaiveDateTime::parse_from_str(&v[0], "%Y-%m-%dT%H:%M:%S").unwrap();
    let now = chrono::Utc::now().naive_utc();
    assert!((now - t).num_seconds().abs() < 5, "{t} vs {now}");
    let v = gen_values(
        &spec("name='t'\ntype='datetime'\nrandom=true\nutc=true\nformat='%s'\nrange=['2024-01-01T00:00:00Z', '2024-01-02T00:00:00Z']"),
        2000,
    );
    let secs: Vec<i64> = v.iter().map(|s| s.parse().unwrap()).collect();
    assert!(secs
        .iter()
        .all(|s| (1_704_067_200..=1_704_153_600).contains(s)));
    assert!(secs.iter().max().unwrap() - secs.iter().min().unwrap() > 80_000);
    let fixed = gen_values(
        &spec("name='t'\ntype='datetime'\nvalue='2024-05-06T07:08:09Z'\nutc=true\nformat='%d/%m/%Y %H:%M'"),
        2,
    );
    assert_eq!(fixed, ["06/05/2024 07:08", "06/05/2024 07:08"]);
    assert!(FieldGen::compile(&spec("name='t'\ntype='datetime'\nformat='%Q'")).is_err());
}

#[test]
fn datetime_cache_follows_the_shown_resolution() {
    let mut g = FieldGen::compile(&spec(
        "name='t'\ntype='datetime'\nutc=true\nformat='%H:%M:%S%.3f'",
    ))
    .unwrap();
    let mut rng = Rng::new(1);
    let base = 1_700_000_000_000_000_000i64;
    let mut a = Vec::new();
    g.write(0, base, &mut rng, false, &mut a);
    let mut b = Vec::new();
    g.write(0, base + 2_000_000, &mut rng, false, &mut b);
    assert_eq!(String::from_utf8(a).unwrap(), "22:13:20.000");
    assert_eq!(String::from_utf8(b).unwrap(), "22:13:20.002");
}

#[test]
fn uuid_and_ipv4() {
    let v = gen_values(&spec("name='u'\ntype='uuid'"), 200);
    for s in &v {
        let parts: Vec<&str> = s.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{s}"
        );
        assert_eq!(&parts[2][..1], "4");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{s}");
    }
    let v = gen_values(&spec("name='ip'\ntype='ipv4'"), 200);
    for s in &v {
        assert!(s.parse::<std::net::Ipv4Addr>().is_ok(), "{s}");
    }
}

#[test]
fn bad_specs_are_errors_naming_the_field() {
    for (t, want) in [
        (
            "name='x'\ntype='integer'\nrange=[5, 1]",
            "min 5 is above max 1",
        ),
        ("name='x'\ntype='bogus'", "unknown field type"),
        (
            "name='x'\ntype='string'",
            "needs `any`, `length` or `value`",
        ),
        ("name='x'\ntype='float'\nformat='%d'", "not allowed"),
    ] {
        let e = format!("{:#}", FieldGen::compile(&spec(t)).unwrap_err());
        assert!(e.contains("field \"x\"") && e.contains(want), "{e}");
    }
    assert!(toml::from_str::<FieldSpec>("name='x'\ntype='integer'\nbogus=1").is_err());
}

/// dummer's sample configuration, as shipped in examples/.
const SAMPLE: &str = include_str!("../../../examples/gen/dummer-sample.toml");

fn plan_of(text: &str) -> GenPlan {
    let f: GenFile = toml::from_str(text).unwrap();
    GenPlan::from_file(f, Some(10), None, false).unwrap()
}

fn line(g: &mut LineGen, i: u64) -> String {
    let mut o = Vec::new();
    g.write_line(i, now_nanos(), &mut o);
    String::from_utf8(o).unwrap()
}

#[test]
fn ltsv_delimited_json_and_template_layouts() {
    let mut g = plan_of(SAMPLE).gen;
    let l = line(&mut g, 3);
    let pairs: Vec<(&str, &str)> = l.split('\t').map(|p| p.split_once(':').unwrap()).collect();
    let keys: Vec<&str> = pairs.iter().map(|p| p.0).collect();
    assert_eq!(
        keys,
        ["id", "time", "level", "method", "uri", "reqtime", "foobar"]
    );
    assert_eq!(pairs[0].1, "0003");

    let mut g = plan_of(
        &SAMPLE
            .replace("labeled = true", "labeled = false\nformat = \"delimited\"")
            .replace("\"\\t\"", "\",\""),
    )
    .gen;
    let l = line(&mut g, 0);
    assert_eq!(l.split(',').count(), 7, "{l}");
    assert!(l.starts_with("0000,"));

    let mut g = plan_of(&SAMPLE.replace("labeled = true", "format = \"json\"")).gen;
    for i in 0..50 {
        let v: serde_json::Value = serde_json::from_str(&line(&mut g, i)).unwrap();
        assert_eq!(v["id"], format!("{i:04}"));
        assert!(v["reqtime"].is_f64());
        assert!(["GET", "POST", "PUT"].contains(&v["method"].as_str().unwrap()));
    }
    let mut g = plan_of(
        &SAMPLE
            .replace("format = \"%04d\"", "")
            .replace("labeled = true", "format = \"json\""),
    )
    .gen;
    let v: serde_json::Value = serde_json::from_str(&line(&mut g, 9)).unwrap();
    assert_eq!(v["id"], 9);

    let mut g = plan_of(&SAMPLE.replace(
        "labeled = true",
        "template = \"{time} [{level}] {{{method}}} {uri} {reqtime}\"",
    ))
    .gen;
    let l = line(&mut g, 0);
    let re_ok = l.contains(" [") && l.contains("] {") && l.contains("} /api/v1/");
    assert!(re_ok, "{l}");
    assert!(matches!(
        plan_of(&SAMPLE.replace("labeled = true", "format = \"json\""))
            .gen
            .layout,
        Layout::Json
    ));
}

#[test]
fn json_escapes_strings() {
    let mut g = plan_of(
        r#"format='json'
[[field]]
name='q"k'
type='string'
value="a\"b\\c\n""#,
    )
    .gen;
    let v: serde_json::Value = serde_json::from_str(&line(&mut g, 0)).unwrap();
    assert_eq!(v["q\"k"], "a\"b\\c\n");
}

#[test]
fn config_errors() {
    let bad = |t: &str| {
        let f: GenFile = toml::from_str(t).unwrap();
        GenPlan::from_file(f, None, None, false)
            .unwrap_err()
            .to_string()
    };
    assert!(bad("stdout = true\noutput = 'x'").contains("one target"));
    assert!(bad("message = 'x'\n[[field]]\nname='a'\ntype='uuid'").contains("one of"));
    assert!(
        bad("format='template'\ntemplate='{nope}'\n[[field]]\nname='a'\ntype='uuid'")
            .contains("no field named")
    );
    assert!(bad("workers = 0").contains("workers"));
    assert!(toml::from_str::<GenFile>("unknown_key = 1").is_err());
}
