//! TLS on the API: `serve --api-tls` (the controller's own certificate) and
//! `--api-tls-cert/--api-tls-key`, ALPN h2 and http/1.1, a run started and followed over
//! https by the CLI, a Rust client and gRPC `WatchRun`; plain HTTP and a wrong CA refused;
//! plain HTTP off loopback refused unless `--insecure-http`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, tls};

const LIMIT: Duration = Duration::from_secs(30);

/// `iohr ARGS` with a bound; exit status, stdout and stderr.
async fn iohr(args: &[&str], ca: Option<&Path>) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(bin("iohr"));
    command
        .args(args)
        .env_remove("IOHR_CA_CERT")
        .kill_on_drop(true);
    if let Some(ca) = ca {
        command.arg("--ca-cert").arg(ca);
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("iohr within 120 s")
        .expect("run iohr");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `GET path` on a new TLS connection offering `alpn`: status, body, chosen protocol.
async fn get_tls(
    base: &str,
    ca: &Path,
    alpn: &[&[u8]],
    path: &str,
) -> (u16, String, Option<Vec<u8>>) {
    let request = Request::get(format!("{base}{path}"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let (response, chosen) = tls::send(&tls::client_config(ca, alpn), request)
        .await
        .expect("an HTTPS answer");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned(), chosen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_started_and_followed_over_https() {
    let install = Installation::new(Backend::Sqlite).await;
    let token = install.full_token();
    let controller = Controller::start_with(&install, 200, None, &["--api-tls"]).await;
    let base = controller.api_url();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let ca = install.ca_cert();
    let api = Api::with_ca(&base, &token, &ca);
    let _agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let target = Target::start().await;

    // ALPN: HTTP/2 and HTTP/1.1 on the one port.
    for (alpn, expected) in [(&b"h2"[..], "h2"), (&b"http/1.1"[..], "http/1.1")] {
        let (status, body, chosen) = get_tls(&base, &ca, &[alpn], "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        assert_eq!(chosen.as_deref(), Some(expected.as_bytes()));
    }

    // The CLI starts a run and follows it to its verdict.
    let spec = install.path("checks.json");
    std::fs::write(&spec, r#"{"checks": [{"path": "/"}]}"#).expect("spec");
    let spec_text = spec.display().to_string();
    let target_url = target.url();
    let (code, stdout, stderr) = iohr(
        &[
            "--server",
            &base,
            "--token",
            &token,
            "reliability",
            "run",
            "--kind",
            "checks",
            "--environment",
            "staging",
            "--target",
            &target_url,
            "--spec",
            &spec_text,
            "--wait",
            "--json",
        ],
        Some(&ca),
    )
    .await;
    assert_eq!(code, 0, "iohr run over https: {stdout} {stderr}");
    let record: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(record["status"], "passed", "{record}");
    let id = record["id"].as_str().expect("id").to_string();

    // A Rust client reads it and its stream over https; gRPC WatchRun over TLS h2.
    let read = api.run(&id).await;
    assert_eq!(read["status"], "passed");
    let events = api.events(&id, None).await.collect(LIMIT).await;
    let numbers: Vec<u64> = events.iter().filter_map(|e| e.id).collect();
    assert!(!numbers.is_empty(), "frames over https SSE");
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("finished"));

    let tls_config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(&ca).expect("CA"),
        ))
        .domain_name("127.0.0.1");
    let channel = tonic::transport::Endpoint::from_shared(base.clone())
        .expect("endpoint")
        .tls_config(tls_config)
        .expect("TLS config")
        .connect()
        .await
        .expect("gRPC over TLS to the API port");
    let mut client = iohr_proto::runs::runs_client::RunsClient::new(channel);
    let mut request = tonic::Request::new(iohr_proto::runs::WatchRunRequest {
        run_id: id.clone(),
        after_frame: 0,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata"),
    );
    let mut stream = client.watch_run(request).await.expect("watch").into_inner();
    let mut grpc = Vec::new();
    while let Some(frame) = tokio::time::timeout(LIMIT, stream.message())
        .await
        .expect("a frame in time")
        .expect("frame")
    {
        grpc.push(frame.number);
    }
    assert_eq!(grpc, numbers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_and_a_wrong_ca_are_refused_on_the_tls_port() {
    let install = Installation::new(Backend::Sqlite).await;
    let token = install.full_token();
    // The same certificate given as files: --api-tls-cert/--api-tls-key.
    let pki = install.data_dir.join("pki");
    let cert = pki.join("server.pem").display().to_string();
    let key = pki.join("server.key").display().to_string();
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--api-tls-cert", &cert, "--api-tls-key", &key],
    )
    .await;
    let base = controller.api_url();
    let ca = install.ca_cert();
    let (status, _, _) = get_tls(&base, &ca, &[b"http/1.1"], "/v1/reliability/agents").await;
    assert_eq!(status, 401, "TLS first, then the token as ever");

    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = format!("http://{}/healthz", controller.api);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = Request::get(plain.as_str())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let answer = tokio::time::timeout(LIMIT, client.request(request))
        .await
        .expect("plain HTTP ended in time");
    assert!(answer.is_err(), "plain HTTP was answered: {answer:?}");
    let plain_base = format!("http://{}", controller.api);
    let args = [
        "--server",
        &plain_base,
        "--token",
        &token,
        "reliability",
        "agents",
    ];
    let (code, _, stderr) = iohr(&args, None).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("error: transport"), "{stderr}");

    // Another controller's CA, and the system roots, do not vouch for this one.
    let other = Installation::new(Backend::Sqlite).await;
    let args = [
        "--server",
        &base,
        "--token",
        &token,
        "reliability",
        "agents",
    ];
    for ca in [Some(other.ca_cert()), None] {
        let (code, _, stderr) = iohr(&args, ca.as_deref()).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("invalid peer certificate") && stderr.contains("UnknownIssuer"),
            "{stderr}"
        );
    }
    let wrong = tls::client_config(&other.ca_cert(), &[b"h2"]);
    let request = Request::get(format!("{base}/healthz"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let refused = tls::send(&wrong, request).await.expect_err("refused");
    assert!(refused.to_string().contains("UnknownIssuer"), "{refused}");
    // The right CA through IOHR_CA_CERT.
    let output = tokio::process::Command::new(bin("iohr"))
        .args(args)
        .env("IOHR_CA_CERT", &ca)
        .output()
        .await
        .expect("iohr");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "no agents");
}

/// `serve` with `args` (and free ports): exits on its own within the bound, or prints its
/// API address and is stopped by the caller.
async fn serve(install: &Installation, args: &[&str]) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(bin("iohr-controller"));
    command.arg("serve");
    command.arg("--data-dir").arg(&install.data_dir);
    command
        .args(["--agent-addr", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command.spawn().expect("spawn iohr-controller")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_off_loopback_is_refused_without_insecure_http() {
    let install = Installation::new(Backend::Sqlite).await;
    let child = serve(&install, &["--api-addr", "0.0.0.0:0"]).await;
    let output = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("refused at once")
        .expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("0.0.0.0:0 is not a loopback address")
            && stderr.contains("--api-tls")
            && stderr.contains("--insecure-http"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing served");

    // Accepted with --insecure-http, or with TLS; talked to on 127.0.0.1 only.
    for (flags, scheme) in [
        (&["--insecure-http"][..], "http"),
        (&["--api-tls"][..], "https"),
    ] {
        let mut args = vec!["--api-addr", "0.0.0.0:0"];
        args.extend(flags);
        let mut child = serve(&install, &args).await;
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
        let line = tokio::time::timeout(LIMIT, async {
            use tokio::io::AsyncBufReadExt;
            let mut line = String::new();
            stdout.read_line(&mut line).await.expect("read");
            line
        })
        .await
        .expect("serving in time");
        let prefix = format!("api listening on {scheme}://0.0.0.0:");
        let port = line
            .trim()
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{line:?} after {flags:?}"));
        let base = format!("{scheme}://127.0.0.1:{port}");
        let (status, body) = if scheme == "https" {
            let (status, body, _) =
                get_tls(&base, &install.ca_cert(), &[b"http/1.1"], "/healthz").await;
            (status, body)
        } else {
            let (status, body) = Api::new(&base, "").with_token(None).get("/healthz").await;
            (status, body.to_string())
        };
        assert_eq!(status, 200, "{flags:?}: {body}");
        let _ = child.kill().await;
    }
}
