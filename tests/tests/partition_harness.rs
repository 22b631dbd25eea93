//! The partition harness itself (issue 34; `tests/src/partition.rs`): a namespace reaches a
//! listener on its host address through its veth pair; each kind of cut stops exactly
//! what it says and heals when its rule is dropped; a dropped namespace leaves nothing
//! behind (no namespace, no veth, no claim). Only addresses the harness made are used.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use iohr_tests::partition::{Cut, Netns};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A line echo server on the namespace's host address.
async fn echo(netns: &Netns) -> SocketAddr {
    let listener = TcpListener::bind((netns.host_ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if write
                        .write_all(format!("{line}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Whether a process inside the namespace gets its line echoed by `addr` within 2 s.
async fn reaches(netns: &Netns, addr: SocketAddr) -> bool {
    let script = format!(
        "exec 3<>/dev/tcp/{}/{} && echo ping >&3 && read -r line <&3 && [ \"$line\" = ping ]",
        addr.ip(),
        addr.port()
    );
    let mut command = netns.command("timeout");
    command
        .args(["2", "bash", "-c", &script])
        .kill_on_drop(true);
    let status = tokio::time::timeout(Duration::from_secs(10), command.status())
        .await
        .expect("the probe ends within 10 s")
        .expect("run the probe");
    status.success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cut_stops_what_it_says_and_heals_when_dropped() {
    let netns = Netns::create();
    let addr = echo(&netns).await;
    let other = echo(&netns).await;
    assert!(reaches(&netns, addr).await, "the veth pair carries traffic");

    for cut in [Cut::Both, Cut::Inbound, Cut::Outbound, Cut::Loss(100)] {
        let rule = netns.cut(cut);
        assert!(!reaches(&netns, addr).await, "{cut:?} cuts the host off");
        drop(rule);
        assert!(reaches(&netns, addr).await, "{cut:?} healed");
    }

    // One way by port: either direction alone breaks a conversation with that port.
    for cut in [Cut::PortIn(addr.port()), Cut::PortOut(addr.port())] {
        let rule = netns.cut(cut);
        assert!(!reaches(&netns, addr).await, "{cut:?} cuts the port");
        assert!(reaches(&netns, other).await, "{cut:?} leaves another port");
        drop(rule);
    }

    // A cut by port leaves the host's other ports reachable.
    let rule = netns.cut(Cut::Port(addr.port()));
    assert!(!reaches(&netns, addr).await, "the port is cut");
    assert!(reaches(&netns, other).await, "another port is not");
    drop(rule);
    assert!(reaches(&netns, addr).await, "the port healed");

    // No loss is no loss: the rule itself passes everything else.
    let _none = netns.cut(Cut::Loss(0));
    assert!(reaches(&netns, addr).await, "0% loss drops nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_namespace_leaves_nothing_behind() {
    let netns = Netns::create();
    let name = netns.name.clone();
    let _rule = netns.cut(Cut::Both);
    let listed = |what: &[&str]| {
        String::from_utf8_lossy(&Command::new("ip").args(what).output().unwrap().stdout)
            .into_owned()
    };
    assert!(listed(&["netns", "list"]).contains(&name));
    let host_ip = netns.host_ip.to_string();
    assert!(listed(&["-4", "addr"]).contains(&host_ip));
    drop(netns);
    assert!(
        !listed(&["netns", "list"]).contains(&name),
        "the namespace is gone"
    );
    assert!(
        !listed(&["-4", "addr"]).contains(&host_ip),
        "the host's end of the veth pair is gone"
    );
}
