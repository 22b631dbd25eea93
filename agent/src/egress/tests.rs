use std::net::{IpAddr, SocketAddr};

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
        ("10.1.2.3", Some(DenyClass::Private)),
        ("172.16.0.1", Some(DenyClass::Private)),
        ("172.31.255.255", Some(DenyClass::Private)),
        ("192.168.1.1", Some(DenyClass::Private)),
        ("100.64.0.1", Some(DenyClass::SharedAddressSpace)),
        ("224.0.0.1", Some(DenyClass::NotUnicast)),
        ("255.255.255.255", Some(DenyClass::NotUnicast)),
        ("::", Some(DenyClass::Unspecified)),
        ("::1", Some(DenyClass::Loopback)),
        ("fe80::1", Some(DenyClass::LinkLocal)),
        ("fd00::1", Some(DenyClass::UniqueLocal)),
        ("fd00:ec2::254", Some(DenyClass::UniqueLocal)),
        ("fc00::1", Some(DenyClass::UniqueLocal)),
        ("ff02::1", Some(DenyClass::NotUnicast)),
        // IPv4 reached through IPv6 is judged as the IPv4 address it reaches.
        ("::ffff:127.0.0.1", Some(DenyClass::Loopback)),
        ("::ffff:169.254.169.254", Some(DenyClass::Metadata)),
        ("64:ff9b::a01:203", Some(DenyClass::Private)),
        ("2002:a9fe:a9fe::1", Some(DenyClass::Metadata)),
        ("::10.0.0.1", Some(DenyClass::Private)),
        ("93.184.216.34", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("2606:4700::1111", None),
        ("::ffff:93.184.216.34", None),
    ];
    for (text, class) in cases {
        let ip: IpAddr = text.parse().expect("address");
        assert_eq!(classify(ip), class, "{text}");
    }
    for name in [
        "localhost",
        "LOCALHOST.",
        "api.localhost",
        "metadata.google.internal",
        "metadata.google.internal.",
        "Metadata",
    ] {
        assert!(classify_name(name).is_some(), "{name}");
    }
    for name in [
        "example.com",
        "localhost.example.com",
        "metadata.example.com",
    ] {
        assert_eq!(classify_name(name), None, "{name}");
    }
}

#[test]
fn open_policy_denies_nothing_and_the_deny_list_refuses_with_the_flag_named() {
    let open = Egress::open();
    assert_eq!(open.check("127.0.0.1", addr("127.0.0.1:80")), Ok(()));
    let deny = Egress::new(true, Vec::new(), Vec::new());
    let denied = deny
        .check("169.254.169.254", addr("169.254.169.254:80"))
        .expect_err("metadata");
    let text = denied.to_string();
    assert!(
        text.starts_with("address 169.254.169.254:80 is denied"),
        "{text}"
    );
    assert!(text.contains("--allow-target"), "{text}");
    let by_name = deny
        .check("rebound.example", addr("10.0.0.7:443"))
        .expect_err("private");
    assert!(
        by_name
            .to_string()
            .starts_with("host rebound.example (resolved to 10.0.0.7:443) is denied"),
        "{by_name}"
    );
    assert_eq!(deny.check("example.com", addr("93.184.216.34:443")), Ok(()));
}

#[test]
fn the_controllers_addresses_are_denied_with_the_list() {
    let controller: IpAddr = "203.0.113.9".parse().expect("ip");
    let deny = Egress::new(true, Vec::new(), vec![controller]);
    assert_eq!(
        deny.check("c.example", addr("203.0.113.9:8443"))
            .expect_err("controller")
            .class,
        DenyClass::Controller
    );
    // Off without the deny-list: an operator's own agent may test its own controller.
    assert_eq!(
        Egress::new(false, Vec::new(), vec![controller])
            .check("c.example", addr("203.0.113.9:8443")),
        Ok(())
    );
}

#[test]
fn allow_entries_let_through_what_they_name_only() {
    let deny = Egress::new(
        true,
        vec![
            rule("127.0.0.1"),
            rule("10.0.0.0/8:8080"),
            rule("api.internal"),
            rule("[fd00::1]:443"),
        ],
        vec!["127.0.0.1".parse().expect("ip")],
    );
    // An entry wins over the controller's address and every class.
    assert_eq!(deny.check("127.0.0.1", addr("127.0.0.1:9")), Ok(()));
    assert_eq!(deny.check("localhost", addr("127.0.0.1:9")), Ok(()));
    assert!(deny.check("127.0.0.2", addr("127.0.0.2:9")).is_err());
    assert_eq!(deny.check("x", addr("10.9.9.9:8080")), Ok(()));
    assert!(deny.check("x", addr("10.9.9.9:8081")).is_err());
    assert_eq!(deny.check("API.internal.", addr("10.1.1.1:1")), Ok(()));
    assert_eq!(deny.check("fd00::1", addr("[fd00::1]:443")), Ok(()));
    assert!(deny.check("fd00::1", addr("[fd00::1]:80")).is_err());
    // A mapped address is matched as the IPv4 address it is.
    assert_eq!(deny.check("x", addr("[::ffff:127.0.0.1]:9")), Ok(()));
}

#[test]
fn allow_rules_parse_and_print_back() {
    for (text, shown) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("10.1.2.3/8", "10.0.0.0/8"),
        ("10.0.0.0/8:443", "10.0.0.0/8:443"),
        ("fd00::1", "fd00::1"),
        ("fd00::/8", "fd00::/8"),
        ("[fd00::1]:443", "[fd00::1]:443"),
        ("[fd00::/8]", "fd00::/8"),
        ("Api.Internal.", "api.internal"),
        ("localhost:8080", "localhost:8080"),
    ] {
        assert_eq!(rule(text).to_string(), shown, "{text}");
    }
    for bad in [
        "",
        ":80",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "10.0.0.0/33",
        "999.1.1.1",
        "[fd00::1",
        "[fd00::1]443",
        "a b",
        "a..b",
        "host:x",
        "*",
        "http://127.0.0.1",
    ] {
        assert!(AllowRule::parse(bad).is_err(), "{bad:?} parsed");
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
        ".{0,24}",
        "[0-9a-f:./\\[\\]]{0,24}",
        "[a-z0-9.-]{1,12}(:[0-9]{1,6})?",
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

#[tokio::test]
async fn names_are_judged_by_what_they_resolve_to_at_connect_time() {
    let deny = Egress::new(true, Vec::new(), Vec::new());
    // Refused by name, before any lookup.
    let local = deny.resolve("localhost.", 80).await.expect_err("denied");
    assert!(
        matches!(local, EgressError::Denied(Denied { addr: None, .. })),
        "{local}"
    );
    // Not an address Rust parses, but one the resolver turns into 127.0.0.1.
    let short = deny.resolve("127.1", 80).await.expect_err("denied");
    let EgressError::Denied(denied) = short else {
        panic!("not a refusal: {short}");
    };
    assert_eq!(denied.class, DenyClass::Loopback);
    // Nothing is dialled for a denied target.
    let refused = deny.connect("127.0.0.1", 9).await.expect_err("denied");
    assert!(matches!(refused, EgressError::Denied(_)), "{refused}");
    assert!(deny.preflight("http://[::1]:8080/x").await.is_err());
    assert!(deny.preflight("http://0.0.0.0:22").await.is_err());
    // An entry lets it through, and the connection is made.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let allowed = Egress::new(true, vec![rule("127.0.0.1")], Vec::new());
    allowed.connect("127.0.0.1", port).await.expect("connects");
    allowed
        .preflight(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("allowed");
    Egress::open()
        .connect("localhost", port)
        .await
        .expect("open policy connects");
}
