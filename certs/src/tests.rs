use super::*;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("iohr-certs-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

#[test]
fn init_then_issue_writes_every_file_with_private_keys_closed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("init");
    let pki = ControllerPki::in_data_dir(&dir);
    init(&pki, &["controller.example".to_string()]).expect("init");
    assert!(pki.exists() && pki.server_cert().exists() && pki.server_key().exists());
    let mode = fs::metadata(pki.ca_key())
        .expect("ca key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let issued = issue_agent(
        &pki,
        "default",
        "edge-1",
        &dir.join("agent"),
        Validity::default(),
    )
    .expect("issue");
    assert_eq!(issued.fingerprint.len(), 64);
    assert_eq!(
        fingerprint_pem_file(&issued.files.cert()).expect("fingerprint"),
        issued.fingerprint
    );
    assert_eq!(
        fs::read_to_string(issued.files.ca_cert()).expect("ca copy"),
        fs::read_to_string(pki.ca_cert()).expect("ca")
    );
    let again = issue_agent(
        &pki,
        "default",
        "edge-1",
        &dir.join("agent2"),
        Validity::default(),
    )
    .expect("issue again");
    assert_ne!(
        again.fingerprint, issued.fingerprint,
        "each certificate is new"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn init_refuses_to_overwrite_a_ca() {
    let dir = temp_dir("twice");
    let pki = ControllerPki::in_data_dir(&dir);
    init(&pki, &[]).expect("init");
    assert!(matches!(init(&pki, &[]), Err(CertError::AlreadyExists(_))));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_certificate_is_renewed_two_thirds_into_its_lifetime() {
    let dir = temp_dir("lifetime");
    let pki = ControllerPki::in_data_dir(&dir);
    init(&pki, &[]).expect("init");
    let issued = issue_agent(
        &pki,
        "default",
        "edge-1",
        &dir.join("agent"),
        Validity::lasting(std::time::Duration::from_secs(9)),
    )
    .expect("issue");
    let lifetime = enrolling::CertLifetime::of_pem_file(&issued.files.cert()).expect("read");
    let secs = |a: std::time::SystemTime, b: std::time::SystemTime| {
        a.duration_since(b).expect("later").as_secs()
    };
    // A tenth of slack before now, and whole seconds.
    let whole = secs(lifetime.not_after, lifetime.not_before);
    assert!((9..=10).contains(&whole), "{whole}");
    let renew = secs(lifetime.renew_at(), lifetime.not_before);
    assert!((6..=7).contains(&renew), "{renew}");

    let expired = issue_agent(
        &pki,
        "default",
        "edge-2",
        &dir.join("agent2"),
        Validity::days(-1),
    )
    .expect("issue expired");
    let lifetime = enrolling::CertLifetime::of_pem_file(&expired.files.cert()).expect("read");
    assert!(lifetime.renew_at() <= std::time::SystemTime::now());
    assert!(matches!(
        enrolling::CertLifetime::of_pem_file(&pki.ca_key()),
        Err(CertError::NotPem { .. })
    ));
    assert!(matches!(
        issue_agent(
            &pki,
            "default",
            "edge-3",
            &dir.join("a3"),
            Validity::days(i64::MAX / 100_000)
        ),
        Err(CertError::OutOfRange)
    ));
    let _ = fs::remove_dir_all(&dir);
}
