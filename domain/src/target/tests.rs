use super::*;

#[test]
fn addresses_and_names_pass_localhost_and_junk_do_not() {
    for ok in [
        "http://127.0.0.1:8080",
        "https://api.example.com/v2",
        "http://[::1]:9000/",
        "http://10.0.0.5",
    ] {
        assert_eq!(validate_target(ok), Ok(()), "{ok}");
    }
    for bad in [
        "http://localhost:8080",
        "http://LOCALHOST",
        "http://app.localhost",
        "http://localhost.:8080",
        "ftp://127.0.0.1",
        "127.0.0.1:8080",
        "http://user:pw@127.0.0.1",
        "http://127.0.0.1:99999",
        "http://127.0.0.1/?x=1",
        "http://",
    ] {
        assert!(validate_target(bad).is_err(), "{bad}");
    }
}

#[test]
fn normalising_drops_what_does_not_change_the_target() {
    for (given, normal) in [
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("HTTP://API.Example.COM:80/V2/", "http://api.example.com/V2"),
        ("https://api.example.com:443", "https://api.example.com"),
        ("https://api.example.com:80", "https://api.example.com:80"),
        ("http://api.example.com:443/", "http://api.example.com:443"),
        ("http://10.0.0.5:08080//", "http://10.0.0.5:8080"),
        ("http://[::1]:80/", "http://[::1]"),
        ("http://[FE80::1]:9000/a/", "http://[fe80::1]:9000/a"),
    ] {
        assert_eq!(normalize_target(given).as_deref(), Ok(normal), "{given}");
    }
    for bad in [
        "http://localhost:8080/",
        "ftp://127.0.0.1",
        "http://127.0.0.1:+80",
        "http://127.0.0.1:",
        "http://a:b:80",
        "http://127.0.0.1/?x=1",
    ] {
        assert!(normalize_target(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_url_on_a_target_matches_it_once_both_are_canonical() {
    assert_eq!(
        with_canonical_origin("HTTP://Host:80/Path?q=A"),
        "http://host/Path?q=A"
    );
    assert_eq!(with_canonical_origin("not a url"), "not a url");
}

mod properties {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};

    use super::super::{normalize_target, validate_target};

    fn config() -> Config {
        Config {
            cases: 512,
            rng_seed: RngSeed::Fixed(0x1a2b_3c4d),
            failure_persistence: None,
            ..Config::default()
        }
    }

    /// A target in its normal form, as parts: scheme, host, port (not the default), path.
    fn parts() -> impl Strategy<Value = (bool, String, Option<u16>, String)> {
        let host = prop_oneof![
            (any::<[u8; 4]>()).prop_map(|o| format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3])),
            "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9]{0,6}){0,3}",
            (any::<[u16; 2]>()).prop_map(|g| format!("[{:x}::{:x}]", g[0], g[1])),
        ]
        .prop_filter("not localhost", |h| !h.contains("localhost"));
        let path = prop::collection::vec("[A-Za-z0-9._~-]{1,8}", 0..4)
            .prop_map(|segments| segments.iter().map(|s| format!("/{s}")).collect());
        (any::<bool>(), host, prop::option::of(1u16..), path)
    }

    /// Spellings of the same target: the scheme and host in any case, the default port
    /// written out or not, leading zeros on the port, trailing slashes.
    fn spelling(
        (https, host, port, path): &(bool, String, Option<u16>, String),
        upper: &[bool],
        default_written: bool,
        zeros: usize,
        slashes: usize,
    ) -> String {
        let scheme = if *https { "https" } else { "http" };
        let recase = |text: &str| -> String {
            text.chars()
                .zip(upper.iter().cycle())
                .map(|(c, up)| if *up { c.to_ascii_uppercase() } else { c })
                .collect()
        };
        let default = if *https { 443 } else { 80 };
        let port = match port {
            Some(p) if *p != default => format!(":{}{p}", "0".repeat(zeros)),
            _ if default_written => format!(":{}{default}", "0".repeat(zeros)),
            _ => String::new(),
        };
        format!(
            "{}://{}{port}{path}{}",
            recase(scheme),
            recase(host),
            "/".repeat(slashes)
        )
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn every_spelling_of_a_target_normalises_to_one(
            target in parts(),
            upper in prop::collection::vec(any::<bool>(), 1..16),
            default_written in any::<bool>(),
            zeros in 0usize..3,
            slashes in 0usize..3,
        ) {
            let plain = spelling(&target, &[false], false, 0, 0);
            let normal = normalize_target(&plain);
            prop_assert!(normal.is_ok(), "{plain}: {normal:?}");
            let other = spelling(&target, &upper, default_written, zeros, slashes);
            prop_assert_eq!(normalize_target(&other), normal.clone(), "{}", other);
            let normal = normal.unwrap_or_default();
            prop_assert_eq!(normalize_target(&normal), Ok(normal.clone()), "idempotent");
            prop_assert!(validate_target(&normal).is_ok());
        }

        #[test]
        fn any_text_normalises_without_panic_and_the_normal_form_is_a_fixed_point(
            text in "(?s)(HTTP|https?|ftp)?(://)?[A-Za-z0-9.:\\[\\]/@?#%+-]{0,40}",
        ) {
            if let Ok(normal) = normalize_target(&text) {
                prop_assert_eq!(normalize_target(&normal), Ok(normal.clone()));
                prop_assert!(!normal.ends_with('/'), "{}", normal);
                prop_assert!(validate_target(&normal).is_ok(), "{}", normal);
            }
        }

        #[test]
        fn arbitrary_strings_never_panic(text in any::<String>()) {
            let _ = normalize_target(&text);
        }
    }
}
