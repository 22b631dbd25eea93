//! `iohr-controller account delete NAME [--yes] [--by WHO]`: shows what goes, asks for the
//! name to be typed again (unless `--yes`), deletes, and says what remains.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::bail;
use iohr_controller::store::{Account, Store};

pub async fn run(
    store: &Store,
    account: &Account,
    yes: bool,
    by: Option<String>,
) -> anyhow::Result<()> {
    if account.is_platform {
        bail!(
            "account {} is the platform's: its agents serve every account; it is not deleted",
            account.name
        );
    }
    let rows = store.account_rows(&account.id).await?;
    let listed: Vec<String> = rows
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(table, count)| format!("{table} {count}"))
        .collect();
    println!(
        "account {} ({}): {}",
        account.name,
        account.id,
        if listed.is_empty() {
            "no rows".to_string()
        } else {
            listed.join(", ")
        }
    );
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!("not deleted: confirm with --yes when not at a terminal");
        }
        print!("type the account's name to delete it and all of it: ");
        std::io::stdout().flush()?;
        let mut typed = String::new();
        std::io::stdin().lock().read_line(&mut typed)?;
        if typed.trim() != account.name {
            bail!("not deleted: the name typed was not {}", account.name);
        }
    }
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".to_string());
    let deletion = store
        .delete_account(&account.id, &account.name, &by)
        .await?;
    println!(
        "deleted account {} ({}) by {}; its tokens and agents are refused from now on (an \
         agent connected to a running controller keeps its connection until it reconnects)",
        deletion.name, deletion.account_id, deletion.deleted_by
    );
    Ok(())
}
