//! Broken networks for the partition tests (issue 34): a network namespace per process
//! that should be cut off (an agent, a replica, a target), joined to the host by a veth
//! pair on a /30 the harness reserves for itself, and nftables rules inside that
//! namespace that cut it fully, one way, by port, or drop a share of its packets.
//!
//! Why nftables inside the namespace: these machines have no `sch_netem` and no `tc`
//! drop action, but nftables works in a namespace the test made, and a rule there touches
//! nothing of the host. Delay and jitter are not kernel rules here: they take a userspace
//! relay in the path ([`crate::proxy`]).
//!
//! Nothing is left behind: a [`Rule`] deletes its table when dropped (the heal), and a
//! [`Netns`] deletes its namespace when dropped, which takes its veth pair and every rule
//! in it along. A test process killed before that leaves a claim file naming its pid; the
//! next claim of that slot, seeing the pid gone, deletes what it left first.
//!
//! Needs root, `ip` (iproute2) and `nft` (Debian `nftables`; tests/run installs it). Where
//! the machine cannot make a namespace or load a rule, [`Netns::create`] fails the test with
//! what is missing and how to fix it: nothing is skipped.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where slots are claimed, one file per /30 in use, holding the claimer's pid.
const CLAIMS: &str = "/run/iohr-partition";
/// Slots: /30s in 10.232.0.0/14, far from anything a machine of this kind routes.
const SLOTS: u32 = 1 << 16;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace joined to the host by a veth pair: the host side is
/// [`Netns::host_ip`], the namespace's side [`Netns::ns_ip`]. A process started with
/// [`Netns::command`] reaches the host (and its listeners on `host_ip`) only through it.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
    /// The host's end of the veth pair, as the namespace sees the host.
    pub host_ip: Ipv4Addr,
    /// The namespace's own address.
    pub ns_ip: Ipv4Addr,
    host_if: String,
    claim: PathBuf,
    rules: AtomicU32,
}

/// What a [`Rule`] drops, as seen from inside the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Every packet, both ways: the namespace is gone from the network.
    Both,
    /// Packets into the namespace (its processes send; nothing comes back in).
    Inbound,
    /// Packets out of the namespace (others' packets arrive; its own do not leave).
    Outbound,
    /// TCP to or from this port on the host side only, both ways.
    Port(u16),
    /// TCP from this port of the host into the namespace only: the namespace's packets
    /// to it get through, the answers (and the port's own messages) do not.
    PortIn(u16),
    /// TCP from the namespace to this port of the host only: the port's messages get in,
    /// the namespace's own (its data and its acknowledgements) do not get out.
    PortOut(u16),
    /// This share of packets in percent, both ways, at random.
    Loss(u8),
}

/// One nftables table in a namespace; dropping it heals what it cut.
#[derive(Debug)]
pub struct Rule {
    netns: String,
    table: String,
}

impl Drop for Rule {
    fn drop(&mut self) {
        // The namespace may be gone already (its drop took the table with it).
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.netns,
                "nft",
                "delete",
                "table",
                "inet",
            ])
            .arg(&self.table)
            .output();
    }
}

fn run(what: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{what}: cannot run {}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: `{}` exited {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// How to fix a machine that cannot do what the harness needs.
const FIX: &str = "the partition tests need root, iproute2 (`ip`) and nftables (`nft`; \
                   `apt-get install -y nftables`, as tests/run does) on a kernel that allows \
                   network namespaces and veth pairs";

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn names(slot: u32) -> (String, String) {
    (format!("iohr-p{slot}"), format!("iohrp{slot}h"))
}

/// The /30 of a slot: (host side, namespace side).
fn addresses(slot: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = (10u32 << 24) | (232 << 16) | (slot * 4);
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// Claims a free slot: a claim file made with `create_new`, or one whose claimer died
/// (what it left is deleted first).
fn claim() -> Result<(u32, PathBuf), String> {
    std::fs::create_dir_all(CLAIMS).map_err(|e| format!("{CLAIMS}: {e}; {FIX}"))?;
    let start = (std::process::id() * 64 + NEXT.fetch_add(1, Ordering::Relaxed)) % SLOTS;
    for step in 0..SLOTS {
        let slot = (start + step) % SLOTS;
        let path = PathBuf::from(format!("{CLAIMS}/{slot}"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => {
                std::fs::write(&path, std::process::id().to_string())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                return Ok((slot, path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok());
                if owner.is_some_and(|pid| !pid_alive(pid)) {
                    let (ns, host_if) = names(slot);
                    let _ = run("stale namespace", &["ip", "netns", "del", &ns]);
                    let _ = run("stale veth", &["ip", "link", "del", &host_if]);
                    let _ = std::fs::remove_file(&path);
                }
            }
            Err(e) => return Err(format!("{}: {e}; {FIX}", path.display())),
        }
    }
    Err(format!("every slot under {CLAIMS} is claimed"))
}

impl Netns {
    /// A new namespace with its veth pair up and addressed, or a failed test naming what
    /// the machine lacks.
    pub fn create() -> Netns {
        Netns::try_new().unwrap_or_else(|e| panic!("{e}\n{FIX}"))
    }

    fn try_new() -> Result<Netns, String> {
        let (slot, claim) = claim()?;
        let (name, host_if) = names(slot);
        let (host_ip, ns_ip) = addresses(slot);
        let netns = Netns {
            name: name.clone(),
            host_ip,
            ns_ip,
            host_if: host_if.clone(),
            claim,
            rules: AtomicU32::new(0),
        };
        // From here `netns` cleans up whatever was made, if a step fails.
        let ns_if = format!("iohrp{slot}n");
        run("namespace", &["ip", "netns", "add", &name])?;
        run("loopback", &["ip", "-n", &name, "link", "set", "lo", "up"])?;
        run(
            "veth pair",
            &[
                "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
            ],
        )?;
        run(
            "veth into namespace",
            &["ip", "link", "set", &ns_if, "netns", &name],
        )?;
        let host_cidr = format!("{host_ip}/30");
        let ns_cidr = format!("{ns_ip}/30");
        run(
            "host address",
            &["ip", "addr", "add", &host_cidr, "dev", &host_if],
        )?;
        run("host side up", &["ip", "link", "set", &host_if, "up"])?;
        run(
            "namespace address",
            &["ip", "-n", &name, "addr", "add", &ns_cidr, "dev", &ns_if],
        )?;
        run(
            "namespace side up",
            &["ip", "-n", &name, "link", "set", &ns_if, "up"],
        )?;
        // Probe nftables now, so a machine without it fails here with how to fix it.
        drop(netns.try_cut(Cut::Loss(0))?);
        Ok(netns)
    }

    /// `program` to be run inside the namespace (`ip netns exec NAME program`): it execs
    /// in place, so the child's pid is the program's and `kill_on_drop` reaches it.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Cuts the namespace off as `cut` says, until the rule is dropped.
    pub fn cut(&self, cut: Cut) -> Rule {
        self.try_cut(cut).unwrap_or_else(|e| panic!("{e}\n{FIX}"))
    }

    fn try_cut(&self, cut: Cut) -> Result<Rule, String> {
        let table = format!("iohr_{}", self.rules.fetch_add(1, Ordering::Relaxed));
        let nft = |what: &str, rule: &str| -> Result<(), String> {
            run(what, &["ip", "netns", "exec", &self.name, "nft", rule])
        };
        nft("nft table", &format!("add table inet {table}"))?;
        let rule = Rule {
            netns: self.name.clone(),
            table: table.clone(),
        };
        let chains: &[&str] = match cut {
            Cut::Inbound | Cut::PortIn(_) => &["input"],
            Cut::Outbound | Cut::PortOut(_) => &["output"],
            _ => &["input", "output"],
        };
        for hook in chains {
            nft(
                "nft chain",
                &format!("add chain inet {table} {hook} {{ type filter hook {hook} priority 0; }}"),
            )?;
            let host = self.host_ip;
            let matches = match cut {
                // `numgen ... mod 100` ranges over 0-99: all of them is a plain drop.
                Cut::Both | Cut::Inbound | Cut::Outbound => "drop".to_string(),
                Cut::Loss(share) if share >= 100 => "drop".to_string(),
                Cut::Port(port) | Cut::PortIn(port) if *hook == "input" => {
                    format!("ip saddr {host} tcp sport {port} drop")
                }
                Cut::Port(port) | Cut::PortIn(port) | Cut::PortOut(port) => {
                    format!("ip daddr {host} tcp dport {port} drop")
                }
                Cut::Loss(share) => format!("numgen random mod 100 < {share} drop"),
            };
            // Loopback inside the namespace stays up: only the link to the host is cut.
            nft(
                "nft rule",
                &format!(
                    "add rule inet {table} {hook} meta iifname != \"lo\" meta oifname != \"lo\" {matches}"
                ),
            )?;
        }
        Ok(rule)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth pair, so the host's end and
        // every rule inside go with it.
        let _ = run("namespace", &["ip", "netns", "del", &self.name]);
        let _ = run("veth", &["ip", "link", "del", &self.host_if]);
        let _ = std::fs::remove_file(&self.claim);
    }
}

/// A controller replica (`serve --replica`) named `name` and an API client of it with
/// the installation's full token: on the host, its agent link on `link` (a namespace's
/// host address, which agents inside it reach too; port 0 for a free one, or a restart's)
/// or on loopback when `None`, or inside `netns` on free ports
/// ([`crate::Controller::start_in`]).
pub async fn replica(
    install: &crate::Installation,
    name: &str,
    heartbeat_ms: u64,
    link: Option<std::net::SocketAddr>,
    netns: Option<&Netns>,
) -> (crate::Controller, crate::Api) {
    let controller = match (netns, link) {
        (Some(netns), None) => {
            crate::Controller::start_in(install, name, heartbeat_ms, netns, &["--replica"]).await
        }
        (Some(_), Some(_)) => panic!("a replica in a namespace takes free ports"),
        (None, Some(link)) => {
            crate::Controller::replica_linked_at(install, name, heartbeat_ms, link).await
        }
        (None, None) => crate::Controller::replica(install, name, heartbeat_ms, None).await,
    };
    let api = crate::Api::new(&controller.api_url(), &install.full_token());
    (controller, api)
}

/// Polls the faults ledger of agent `agent` (its `--state-dir`, `agent-state-NAME` under
/// `install_root` as [`crate::Agent::start`] gives it) until every entry it opened is
/// closed: no fault of it is left behind.
pub async fn ledger_all_closed(
    install_root: &std::path::Path,
    agent: &str,
    limit: std::time::Duration,
) {
    let ledger = install_root.join(format!("agent-state-{agent}/ledger/ledger.jsonl"));
    crate::wait_for("a ledger with every entry closed", limit, || async {
        let text = std::fs::read_to_string(&ledger).ok()?;
        let count = |op: &str| text.lines().filter(|l| l.contains(op)).count();
        let opened = count("\"op\":\"open\"");
        (opened > 0 && opened == count("\"op\":\"close\"")).then_some(())
    })
    .await;
}
