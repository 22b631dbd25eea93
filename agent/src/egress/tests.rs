//! The agent's use of the deny-list; the list itself and the exceptions' parser are
//! tested in `iohr_domain::egress`.

use std::net::{IpAddr, SocketAddr};

use super::*;

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("socket address")
}

fn rule(text: &str) -> AllowRule {
    AllowRule::parse(text).expect("rule")
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
    // Local and metadata names are refused by name, whatever they resolve to; a name
    // under .internal is judged on its address.
    assert_eq!(
        deny.check("metadata.google.internal", addr("93.184.216.34:80"))
            .expect_err("metadata name")
            .class,
        DenyClass::MetadataName
    );
    assert_eq!(deny.check("api.internal", addr("93.184.216.34:80")), Ok(()));
    assert!(deny.check("api.internal", addr("10.0.0.1:80")).is_err());
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

#[test]
fn a_runs_account_entries_widen_that_runs_policy_only() {
    let platform = Egress::new(true, vec![rule("10.0.0.0/8")], Vec::new());
    let run = platform.allowing([rule("127.0.0.1:8080")]);
    assert!(run.check("127.0.0.1", addr("127.0.0.1:8080")).is_ok());
    assert!(run.check("127.0.0.1", addr("127.0.0.1:8081")).is_err());
    assert!(run.check("10.1.1.1", addr("10.1.1.1:80")).is_ok());
    assert!(run.is_denying());
    // The agent's own policy is unchanged for the next run.
    assert!(platform.check("127.0.0.1", addr("127.0.0.1:8080")).is_err());
}
