//! `iohr-controller account allow-target ACCOUNT [ENTRY...] [--remove] [--by WHO]`: the
//! operator's per-account egress exceptions. With entries it adds them (or removes them,
//! with --remove); without, it lists them. No API sets them: a tenant never widens its own
//! egress. Each change writes an audit line to the account.

use anyhow::bail;
use clap::Args;
use iohr_controller::store::{AllowAdd, MAX_EGRESS_ALLOW_PER_ACCOUNT};
use iohr_domain::egress::AllowRule;

use crate::{StoreArgs, find_account};

#[derive(Args)]
pub(crate) struct AllowTargetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The account's name.
    account: String,
    /// CIDR|HOST[:PORT] (as `serve --allow-webhook-target`); none lists the account's.
    entries: Vec<AllowRule>,
    /// Remove the entries instead of adding them.
    #[arg(long, requires = "entries")]
    remove: bool,
    /// Who changes them, for the audit line (default: $USER).
    #[arg(long)]
    by: Option<String>,
}

pub(crate) async fn run(args: AllowTargetArgs) -> anyhow::Result<()> {
    let store = args.store.open().await?;
    let account = find_account(&store, &args.account).await?;
    let name = &account.name;
    // The canonical spelling, so one entry is stored (and removed) one way.
    let entries: Vec<String> = args.entries.iter().map(ToString::to_string).collect();
    let by = args
        .by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".to_string());
    let actor = format!("operator:{by}");
    if entries.is_empty() {
        let held = store.egress_allow(&account.id).await?;
        if held.is_empty() {
            println!("account {name}: no egress exceptions of its own");
        }
        for entry in held {
            println!("{entry}");
        }
        return Ok(());
    }
    if args.remove {
        let removed = store
            .remove_egress_allow(&account.id, &entries, &actor)
            .await?;
        let kept: Vec<&String> = entries.iter().filter(|e| !removed.contains(e)).collect();
        if !removed.is_empty() {
            println!(
                "account {name}: egress exceptions removed: {}",
                removed.join(" ")
            );
        }
        if !kept.is_empty() {
            println!(
                "account {name}: held none of {}",
                kept.iter()
                    .map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        return Ok(());
    }
    match store
        .add_egress_allow(&account.id, &entries, &actor)
        .await?
    {
        AllowAdd::Added(added) if added.is_empty() => {
            println!("account {name}: already held all of them")
        }
        AllowAdd::Added(added) => println!(
            "account {name}: egress exceptions added: {} (for its webhooks and cloud runs; a running controller applies them at once)",
            added.join(" ")
        ),
        AllowAdd::TooMany => bail!(
            "not added: an account holds at most {MAX_EGRESS_ALLOW_PER_ACCOUNT} egress exceptions"
        ),
    }
    Ok(())
}
