use super::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn uri(text: &str) -> hyper::Uri {
    text.parse().unwrap()
}

fn rules(list: &[&str]) -> Vec<AllowRule> {
    list.iter().map(|r| r.parse().unwrap()).collect()
}

#[test]
fn every_denied_class_is_refused_by_default() {
    let policy = EgressPolicy::default();
    for (url, class) in [
        ("http://127.0.0.1:9000/", "loopback"),
        ("http://127.8.9.10/", "loopback"),
        ("http://[::1]:80/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://169.254.1.1/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.1.2.3:8080/", "private (RFC 1918)"),
        ("http://172.16.0.1/", "private (RFC 1918)"),
        ("http://192.168.1.1/", "private (RFC 1918)"),
        ("http://[fd00::1]/", "unique-local"),
        ("http://[fc00::1]/", "unique-local"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://0.0.0.0:22/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://100.64.0.1/", "shared (RFC 6598)"),
        ("http://100.100.100.200/", "metadata"),
        ("http://168.63.129.16/", "metadata"),
        ("http://224.0.0.1/", "multicast or reserved"),
        ("http://255.255.255.255/", "multicast or reserved"),
        // The IPv4 inside an IPv4-mapped or NAT64 address is what is judged.
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private (RFC 1918)"),
        ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),
        ("http://[2002:7f00:1::]/", "loopback"),
        ("http://[::10.0.0.1]/", "private (RFC 1918)"),
        ("http://192.0.0.192/", "metadata"),
    ] {
        match policy.check_url(&uri(url)) {
            Err(Refusal::Address { class: got, .. }) => assert_eq!(got, class, "{url}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    for name in [
        "http://localhost/",
        "http://LOCALHOST./",
        "http://a.localhost:9/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://Metadata.Google.Internal./",
        "http://metadata/",
        "http://metadata.azure.com/",
        "http://instance-data/",
        "http://db.internal/",
        "http://printer.local/",
    ] {
        assert!(
            matches!(policy.check_url(&uri(name)), Err(Refusal::Name { .. })),
            "{name}"
        );
    }
}

#[test]
fn public_addresses_and_names_pass() {
    let policy = EgressPolicy::default();
    for url in [
        "https://hooks.slack.com/services/T0/B0/x",
        "http://93.184.216.34/",
        "http://[2606:2800:220:1::1]/",
        "http://8.8.8.8:53/",
        // Numeric forms getaddrinfo reads as 127.0.0.1 are names here: they are judged
        // on what they resolve to, when a delivery connects.
        "http://127.1:9000/",
        "http://2130706433/",
    ] {
        assert_eq!(policy.check_url(&uri(url)), Ok(()), "{url}");
    }
}

#[test]
fn the_allow_list_opens_what_it_names_and_no_more() {
    let policy = EgressPolicy::new(
        rules(&[
            "127.0.0.0/8",
            "10.0.0.5:8080",
            "[fd00::/8]:443",
            "hooks.internal",
        ]),
        &[],
    );
    assert_eq!(policy.check_url(&uri("http://127.0.0.1:9/")), Ok(()));
    assert_eq!(policy.check_url(&uri("http://10.0.0.5:8080/")), Ok(()));
    assert!(policy.check_url(&uri("http://10.0.0.5:8081/")).is_err());
    assert!(policy.check_url(&uri("http://10.0.0.6:8080/")).is_err());
    assert_eq!(policy.check_url(&uri("https://[fd00::9]/")), Ok(()));
    assert!(policy.check_url(&uri("http://[fd00::9]/")).is_err());
    assert!(policy.check_url(&uri("http://[::1]/")).is_err());
    assert!(policy.check_url(&uri("http://169.254.169.254/")).is_err());
    // A name the operator allows may resolve into a denied class.
    assert_eq!(policy.check_url(&uri("http://HOOKS.internal./")), Ok(()));
    let private = SocketAddr::from(([10, 9, 9, 9], 80));
    assert_eq!(policy.check_addr("hooks.internal", private), Ok(()));
    assert!(policy.check_addr("other.example", private).is_err());
    assert!(
        policy
            .check_url(&uri("http://metadata.google.internal/"))
            .is_err()
    );
}

#[test]
fn the_controllers_own_addresses_stay_refused_unless_a_rule_names_the_port() {
    let api = SocketAddr::from(([127, 0, 0, 1], 8480));
    let policy = EgressPolicy::new(rules(&["127.0.0.0/8"]), &[api]);
    assert_eq!(
        policy.check_url(&uri("http://127.0.0.1:8480/v1/reliability/runs")),
        Err(Refusal::Own { addr: api })
    );
    assert_eq!(
        policy.check_addr("x", SocketAddr::from(([127, 0, 0, 1], 8481))),
        Ok(())
    );
    let opened = EgressPolicy::new(rules(&["127.0.0.1:8480"]), &[api]);
    assert_eq!(opened.check_addr("x", api), Ok(()));
    // Listening on every interface: loopback at that port is the controller itself.
    let everywhere = EgressPolicy::new(
        rules(&["127.0.0.0/8"]),
        &[SocketAddr::from(([0, 0, 0, 0], 8443))],
    );
    assert!(matches!(
        everywhere.check_addr("x", SocketAddr::from(([127, 0, 0, 1], 8443))),
        Err(Refusal::Own { .. })
    ));
}

#[test]
fn rules_parse_or_say_why() {
    for good in [
        "127.0.0.0/8",
        "10.0.0.5",
        "10.0.0.5:8080",
        "::1",
        "[::1]:9000",
        "[fd00::/8]",
        "fd00::/8",
        "hooks.example.com",
        "hooks.example.com:443",
    ] {
        assert!(good.parse::<AllowRule>().is_ok(), "{good}");
    }
    for bad in [
        "",
        "10.0.0.0/33",
        "10.0.0.5:0",
        "10.0.0.5:99999",
        "host:port",
        "[::1",
        "[::1]x",
        "a b",
        "http://x",
        "a..b",
    ] {
        assert!(bad.parse::<AllowRule>().is_err(), "{bad}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(38), ..ProptestConfig::default() })]

    /// Any text is parsed or refused without a panic.
    #[test]
    fn any_rule_text_is_judged(text in "\\PC{0,60}") {
        let _ = text.parse::<AllowRule>();
    }

    /// Every IPv4 address of a denied class is refused as a literal and at connection,
    /// also when written as IPv4-mapped IPv6.
    #[test]
    fn denied_v4_is_denied_in_every_spelling(a in any::<u8>(), b in any::<u8>(), c in any::<u8>(), d in any::<u8>(), port in 1u16..) {
        let v4 = Ipv4Addr::new(a, b, c, d);
        let policy = EgressPolicy::default();
        let plain = policy.check_addr("x", SocketAddr::new(IpAddr::V4(v4), port)).is_err();
        let mapped = policy.check_addr("x", SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), port)).is_err();
        prop_assert_eq!(plain, mapped);
        prop_assert_eq!(plain, denied_class(IpAddr::V4(v4)).is_some());
        if a == 127 || a == 10 || (a == 192 && b == 168) || (a == 169 && b == 254) {
            prop_assert!(plain);
        }
    }
}

#[test]
fn an_accounts_exceptions_widen_only_its_own_policy() {
    let shared = EgressPolicy::new(rules(&["10.0.0.0/8"]), &[]);
    let account = shared.with_account(&["127.0.0.1:8080".to_string(), "not a rule".to_string()]);
    // Webhooks: the account's entry and the process-wide one both count, for it only.
    assert_eq!(account.check_url(&uri("http://127.0.0.1:8080/")), Ok(()));
    assert!(account.check_url(&uri("http://127.0.0.1:8081/")).is_err());
    assert_eq!(account.check_url(&uri("http://10.1.1.1/")), Ok(()));
    assert!(shared.check_url(&uri("http://127.0.0.1:8080/")).is_err());
    // Cloud runs: the account's entry opens its literal target; the shared policy's
    // webhook exceptions do not (they are not cloud exceptions).
    assert_eq!(
        account.check_cloud_target(&uri("http://127.0.0.1:8080/")),
        Ok(())
    );
    assert!(
        account
            .check_cloud_target(&uri("http://10.1.1.1/"))
            .is_err()
    );
    assert!(
        shared
            .check_cloud_target(&uri("http://127.0.0.1:8080/"))
            .is_err()
    );
}
