use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::*;

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("socket address")
}

fn rule(text: &str) -> AllowRule {
    AllowRule::parse(text).expect("rule")
}

#[test]
fn every_denied_class_is_refused_and_public_addresses_pass() {
    let cases = [
        ("0.0.0.0", Some(DenyClass::Unspecified)),
        ("0.1.2.3", Some(DenyClass::Unspecified)),
        ("127.0.0.1", Some(DenyClass::Loopback)),
        ("127.255.0.9", Some(DenyClass::Loopback)),
        ("169.254.169.254", Some(DenyClass::Metadata)),
        ("169.254.1.1", Some(DenyClass::LinkLocal)),
        ("100.100.100.200", Some(DenyClass::Metadata)),
        ("168.63.129.16", Some(DenyClass::Metadata)),
        ("192.0.0.192", Some(DenyClass::Metadata)),
        ("10.1.2.3", Some(DenyClass::Private)),
        ("172.16.0.1", Some(DenyClass::Private)),
        ("172.31.255.255", Some(DenyClass::Private)),
        ("192.168.1.1", Some(DenyClass::Private)),
        ("100.64.0.1", Some(DenyClass::SharedAddressSpace)),
        ("100.127.255.255", Some(DenyClass::SharedAddressSpace)),
        ("224.0.0.1", Some(DenyClass::NotUnicast)),
        ("240.0.0.1", Some(DenyClass::NotUnicast)),
        ("255.255.255.255", Some(DenyClass::NotUnicast)),
        ("::", Some(DenyClass::Unspecified)),
        ("::1", Some(DenyClass::Loopback)),
        ("fe80::1", Some(DenyClass::LinkLocal)),
        ("fec0::1", Some(DenyClass::LinkLocal)),
        ("fd00::1", Some(DenyClass::UniqueLocal)),
        ("fd00:ec2::254", Some(DenyClass::Metadata)),
        ("fc00::1", Some(DenyClass::UniqueLocal)),
        ("ff02::1", Some(DenyClass::NotUnicast)),
        // IPv4 reached through IPv6 is judged as the IPv4 address it reaches.
        ("::ffff:127.0.0.1", Some(DenyClass::Loopback)),
        ("::ffff:10.0.0.1", Some(DenyClass::Private)),
        ("::ffff:169.254.169.254", Some(DenyClass::Metadata)),
        ("64:ff9b::a01:203", Some(DenyClass::Private)),
        ("64:ff9b::a9fe:a9fe", Some(DenyClass::Metadata)),
        ("2002:a9fe:a9fe::1", Some(DenyClass::Metadata)),
        ("2002:7f00:1::", Some(DenyClass::Loopback)),
        ("::10.0.0.1", Some(DenyClass::Private)),
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("2606:4700::1111", None),
        ("2606:2800:220:1::1", None),
        ("::ffff:93.184.216.34", None),
        ("2002:5db8:d822::1", None),
    ];
    for (text, class) in cases {
        let ip: IpAddr = text.parse().expect("address");
        assert_eq!(classify(ip), class, "{text}");
    }
    for (name, class) in [
        ("localhost", DenyClass::LocalName),
        ("LOCALHOST.", DenyClass::LocalName),
        ("api.localhost", DenyClass::LocalName),
        ("[localhost]", DenyClass::LocalName),
        ("metadata.google.internal", DenyClass::MetadataName),
        ("Metadata.Google.Internal.", DenyClass::MetadataName),
        ("Metadata", DenyClass::MetadataName),
        ("metadata.goog", DenyClass::MetadataName),
        ("metadata.azure.com", DenyClass::MetadataName),
        ("instance-data", DenyClass::MetadataName),
        ("instance-data.ec2.internal", DenyClass::MetadataName),
        ("db.internal", DenyClass::PrivateName),
        ("printer.local.", DenyClass::PrivateName),
    ] {
        assert_eq!(classify_name(name), Some(class), "{name}");
    }
    for name in [
        "example.com",
        "localhost.example.com",
        "metadata.example.com",
        "internal.example.com",
        "local",
        "127.1",
    ] {
        assert_eq!(classify_name(name), None, "{name}");
    }
}

#[test]
fn every_class_reads_as_a_sentence_and_a_word() {
    assert_eq!(
        DenyClass::Loopback.describe(),
        "a loopback address (127.0.0.0/8, ::1)"
    );
    assert_eq!(DenyClass::Private.short(), "private (RFC 1918)");
    assert_eq!(DenyClass::Metadata.short(), "metadata");
}

#[test]
fn allow_entries_let_through_what_they_name_only() {
    let rules = [
        rule("127.0.0.1"),
        rule("10.0.0.0/8:8080"),
        rule("api.internal"),
        rule("[fd00::1]:443"),
    ];
    let allowed = |host: &str, at: &str| rules.iter().any(|r| r.allows(host, addr(at)));
    assert!(allowed("127.0.0.1", "127.0.0.1:9"));
    assert!(allowed("localhost", "127.0.0.1:9"));
    assert!(!allowed("127.0.0.2", "127.0.0.2:9"));
    assert!(allowed("x", "10.9.9.9:8080"));
    assert!(!allowed("x", "10.9.9.9:8081"));
    assert!(allowed("API.internal.", "10.1.1.1:1"));
    assert!(allowed("fd00::1", "[fd00::1]:443"));
    assert!(!allowed("fd00::1", "[fd00::1]:80"));
    // A mapped address is matched as the IPv4 address it is, in a rule and in a target.
    assert!(allowed("x", "[::ffff:127.0.0.1]:9"));
    assert!(rule("::ffff:10.0.0.1").covers(addr("10.0.0.1:80")));
    // A name's rule covers no network, a network's names no host.
    assert!(!rule("api.internal").covers(addr("10.1.1.1:1")));
    assert!(!rule("10.0.0.0/8").names("api.internal", 1));
    assert_eq!(rule("10.0.0.0/8:8080").port(), Some(8080));
    assert_eq!(rule("api.internal").port(), None);
}

#[test]
fn allow_rules_parse_and_print_back() {
    for (text, shown) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        (" 127.0.0.0/8 ", "127.0.0.0/8"),
        ("10.1.2.3/8", "10.0.0.0/8"),
        ("10.0.0.0/8:443", "10.0.0.0/8:443"),
        ("10.0.0.5", "10.0.0.5"),
        ("::1", "::1"),
        ("[::1]:9000", "[::1]:9000"),
        ("fd00::1", "fd00::1"),
        ("fd00::/8", "fd00::/8"),
        ("[fd00::1]:443", "[fd00::1]:443"),
        ("[fd00::/8]", "fd00::/8"),
        ("[fd00::/8]:443", "[fd00::/8]:443"),
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("Api.Internal.", "api.internal"),
        ("hooks.example.com:443", "hooks.example.com:443"),
        ("localhost:8080", "localhost:8080"),
    ] {
        assert_eq!(rule(text).to_string(), shown, "{text}");
    }
    for bad in [
        "",
        " ",
        ":80",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:+80",
        "127.0.0.1:65536",
        "10.0.0.5:99999",
        "10.0.0.0/33",
        "999.1.1.1",
        "127.1",
        "[fd00::1",
        "[fd00::1]443",
        "[::1]x",
        "[api.internal]",
        "api.internal]",
        "a b",
        "a..b",
        "host:x",
        "host:port",
        "*",
        "http://127.0.0.1",
        "http://x",
    ] {
        let error = AllowRule::parse(bad).expect_err(bad);
        assert!(error.to_string().contains("CIDR|HOST[:PORT]"), "{error}");
    }
}

/// Any text: parsing never panics, and what parses prints as text that parses to the same
/// rule.
#[test]
fn allow_rule_parsing_round_trips_on_any_text() {
    let config = Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[38; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let text = prop_oneof![
        "\\PC{0,40}",
        "[0-9a-f:./\\[\\] ]{0,24}",
        "[a-zA-Z0-9.-]{1,12}(:[0-9]{1,6})?",
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(/[0-9]{1,2})?(:[0-9]{1,5})?",
    ];
    runner
        .run(&text, |text| {
            if let Ok(parsed) = AllowRule::parse(&text) {
                let again = AllowRule::parse(&parsed.to_string());
                prop_assert_eq!(again, Ok(parsed));
            }
            Ok(())
        })
        .expect("property holds");
}

/// Every IPv4 address is judged the same in every IPv6 spelling that reaches it.
#[test]
fn an_ipv4_address_is_judged_alike_in_every_spelling() {
    let config = Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[39; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&any::<[u8; 4]>(), |octets| {
            let v4 = Ipv4Addr::from(octets);
            let plain = classify(IpAddr::V4(v4));
            let [a, b, c, d] = octets;
            let nat64: IpAddr = format!("64:ff9b::{a}.{b}.{c}.{d}").parse().expect("v6");
            prop_assert_eq!(plain, classify(IpAddr::V6(v4.to_ipv6_mapped())));
            prop_assert_eq!(plain, classify(nat64));
            if a == 127 || a == 10 || (a == 192 && b == 168) || (a == 169 && b == 254) {
                prop_assert!(plain.is_some());
            }
            Ok(())
        })
        .expect("property holds");
}
