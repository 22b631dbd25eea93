//! Claims between processes, with real processes as the other claimants.

use std::process::Command;

use super::claim::{Record, State};
use super::*;

fn pin_of(child: &std::process::Child) -> Pin {
    let pid = child.id();
    Pin {
        pid,
        start_time: process::stat(pid).unwrap().unwrap().start_time,
    }
}

fn write_claim(dir: &Path, id: &str, state: State, by: Claimant, pin: Pin) {
    std::fs::create_dir_all(super::dir(dir)).unwrap();
    write_json(
        &file(dir, id, claim::EXT).unwrap(),
        &Record {
            state,
            by,
            pid: pin.pid,
            start_time: pin.start_time,
        },
    )
    .unwrap();
}

#[test]
fn the_first_claim_wins_and_a_live_claimant_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(
        claim::claim(d, "a-1", Claimant::Agent).unwrap(),
        Claim::Ours
    );
    // The same process again (a retried undo) still has it.
    assert_eq!(
        claim::claim(d, "a-1", Claimant::Agent).unwrap(),
        Claim::Ours
    );

    // Another live process's claim is left to it.
    let mut other = Command::new("sleep").arg("30").spawn().unwrap();
    let pin = pin_of(&other);
    write_claim(d, "b-2", State::Undoing, Claimant::Warden, pin);
    assert_eq!(
        claim::claim(d, "b-2", Claimant::Agent).unwrap(),
        Claim::Busy {
            by: Claimant::Warden,
            pid: pin.pid
        }
    );
    // Once it is gone its claim is stale: taken over.
    other.kill().unwrap();
    other.wait().unwrap();
    assert_eq!(
        claim::claim(d, "b-2", Claimant::Agent).unwrap(),
        Claim::Ours
    );

    // A claim by a pid the kernel gave another process (another start time) is stale too.
    let live = Command::new("sleep").arg("30").spawn().unwrap();
    let reused = Pin {
        start_time: pin_of(&live).start_time + 1,
        ..pin_of(&live)
    };
    write_claim(d, "c-3", State::Undoing, Claimant::Warden, reused);
    assert_eq!(
        claim::claim(d, "c-3", Claimant::Agent).unwrap(),
        Claim::Ours
    );
    drop(live);
}

#[test]
fn undone_stays_undone_and_a_failed_undo_gives_the_claim_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(
        claim::claim(d, "a-1", Claimant::Warden).unwrap(),
        Claim::Ours
    );
    claim::settle(d, "a-1", true).unwrap();
    assert_eq!(
        claim::claim(d, "a-1", Claimant::Agent).unwrap(),
        Claim::Undone {
            by: Claimant::Warden
        }
    );

    // Given up: another may claim it.
    assert_eq!(
        claim::claim(d, "b-2", Claimant::Agent).unwrap(),
        Claim::Ours
    );
    claim::settle(d, "b-2", false).unwrap();
    assert!(claim::read(d, "b-2").is_none());

    // Settling a claim that is not this process's changes nothing.
    let other = Command::new("sleep").arg("30").spawn().unwrap();
    write_claim(d, "c-3", State::Undoing, Claimant::Warden, pin_of(&other));
    claim::settle(d, "c-3", true).unwrap();
    assert_eq!(claim::read(d, "c-3").unwrap().state, State::Undoing);
    drop(other);
}

#[test]
fn only_ledger_ids_name_files() {
    let d = Path::new("/tmp/x");
    assert!(file(d, "0001700000000000-0000abcd", "claim").is_ok());
    for bad in ["", "../up", "a/b", "a.b", &"x".repeat(65)] {
        assert!(file(d, bad, "claim").is_err(), "{bad:?}");
    }
}

#[test]
fn only_faults_that_outlive_the_agent_get_a_warden() {
    assert!(outlives_agent(&Undo::Resume {
        pid: 2,
        start_time: 3
    }));
    assert!(outlives_agent(&Undo::RemoveFile { path: "/x".into() }));
    assert!(outlives_agent(&Undo::RemoveQdisc {
        interface: "lo".into()
    }));
    assert!(outlives_agent(&Undo::Restart {
        command: "true".into()
    }));
    assert!(!outlives_agent(&Undo::StopChild {
        pid: 2,
        start_time: 3
    }));
    assert!(!outlives_agent(&Undo::ProxyFault {
        proxy: "p".into(),
        id: 1
    }));
    assert!(!outlives_agent(&Undo::Nothing { why: "w".into() }));
}

#[test]
fn a_sweep_keeps_only_the_files_of_open_entries() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let me = Pin::of_self().unwrap();
    for id in ["open-1", "closed-2"] {
        write_claim(d, id, State::Undone, Claimant::Warden, me);
        write_json(
            &file(d, id, ARMED).unwrap(),
            &Armed {
                ledger_id: id.into(),
                warden: me,
                owner: me,
                deadline: 1,
            },
        )
        .unwrap();
    }
    sweep(d, &["open-1".to_string()]);
    let left: Vec<String> = armed(d).unwrap().into_iter().map(|a| a.ledger_id).collect();
    assert_eq!(left, ["open-1"]);
    assert!(claim::read(d, "open-1").is_some());
    assert!(claim::read(d, "closed-2").is_none());
}
