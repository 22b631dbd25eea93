//! `iohr reliability webhooks create|list|deliveries|redeliver|delete`: the account's
//! webhook subscriptions and their delivery logs.

use clap::Subcommand;
use serde_json::{Value, json};

use crate::Ctx;
use crate::client::{query, segment};
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json, or_dash};

#[derive(Subcommand, Debug)]
pub enum WebhooksCommand {
    /// Subscribe a URL to events; prints the signing secret, shown this once.
    Create {
        /// The receiver, http:// or https://, without credentials.
        #[arg(long)]
        url: String,
        /// An event type: reliability.run.finished or reliability.finding.created
        /// (repeat for both).
        #[arg(long = "event", value_name = "TYPE", required = true)]
        events: Vec<String>,
        /// `standard` (the event as JSON) or `slack` (an incoming webhook's {"text"}).
        #[arg(long, value_name = "F")]
        format: Option<String>,
    },
    /// The account's subscriptions.
    List,
    /// A subscription's delivery log, newest event first.
    Deliveries {
        /// The subscription's id.
        id: String,
        /// At most this many deliveries on the page.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// The `next_cursor` of the previous page.
        #[arg(long, value_name = "C")]
        cursor: Option<i64>,
    },
    /// Send one event to a subscription again (its retry schedule starts over).
    Redeliver {
        /// The subscription's id.
        id: String,
        /// The event's id (evt_...), as the delivery log names it.
        event_id: String,
    },
    /// Delete a subscription and its delivery log.
    Delete {
        /// The subscription's id.
        id: String,
    },
}

fn hook_path(id: &str) -> Result<String> {
    Ok(format!(
        "/v1/reliability/webhooks/{}",
        segment("the webhook ID", id)?
    ))
}

pub async fn execute(ctx: &Ctx, command: WebhooksCommand) -> Result<u8> {
    match command {
        WebhooksCommand::Create {
            url,
            events,
            format,
        } => {
            let mut body = json!({"url": url, "events": events});
            if let Some(format) = format {
                body["format"] = json!(format);
            }
            let raw = ctx.api.post("/v1/reliability/webhooks", &body).await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            let mut text = render_hooks(std::slice::from_ref(&raw));
            text.push_str(&format!(
                "secret (shown once; verify deliveries with it): {}\n",
                raw["secret"].as_str().unwrap_or("-")
            ));
            emit(&text)?;
        }
        WebhooksCommand::List => {
            let raw = ctx.api.get("/v1/reliability/webhooks").await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            let hooks = raw["webhooks"]
                .as_array()
                .ok_or_else(|| Failure::protocol("the answer lists no webhooks"))?;
            if hooks.is_empty() {
                emit("no webhooks")?;
            } else {
                emit(&render_hooks(hooks))?;
            }
        }
        WebhooksCommand::Deliveries { id, limit, cursor } => {
            let pairs = [
                ("limit", limit.map(|n| n.to_string())),
                ("cursor", cursor.map(|n| n.to_string())),
            ];
            let path = format!("{}/deliveries{}", hook_path(&id)?, query(&pairs));
            let raw = ctx.api.get(&path).await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            let rows = raw["deliveries"]
                .as_array()
                .ok_or_else(|| Failure::protocol("the answer lists no deliveries"))?;
            emit(&render_deliveries(rows, &id, raw["next_cursor"].as_i64()))?;
        }
        WebhooksCommand::Redeliver { id, event_id } => {
            let path = format!(
                "{}/deliveries/{}/redeliver",
                hook_path(&id)?,
                segment("the event ID", &event_id)?
            );
            let raw = ctx.api.post(&path, &json!({})).await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            emit(&format!(
                "event {event_id} to webhook {id}: redelivery queued"
            ))?;
        }
        WebhooksCommand::Delete { id } => {
            ctx.api.delete(&hook_path(&id)?).await?;
            if ctx.json {
                return emit_json(&json!({"deleted": id})).map(|()| 0);
            }
            emit(&format!("webhook {id} deleted"))?;
        }
    }
    Ok(0)
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

fn render_hooks(hooks: &[Value]) -> String {
    let mut t = Table::new(&["ID", "STATE", "FORMAT", "EVENTS", "URL"]);
    for h in hooks {
        let events: Vec<String> = h["events"]
            .as_array()
            .map(|list| list.iter().map(text).collect())
            .unwrap_or_default();
        t.row([
            text(&h["id"]),
            text(&h["state"]),
            text(&h["format"]),
            events.join(","),
            text(&h["url"]),
        ]);
    }
    t.render()
}

fn render_deliveries(rows: &[Value], id: &str, next: Option<i64>) -> String {
    if rows.is_empty() {
        return "no deliveries".to_string();
    }
    let mut t = Table::new(&["EVENT", "TYPE", "STATUS", "ATTEMPTS", "CODE", "LAST ERROR"]);
    for d in rows {
        t.row([
            text(&d["event_id"]),
            text(&d["event_type"]),
            text(&d["status"]),
            text(&d["attempts"]),
            text(&d["last_status_code"]),
            or_dash(d["last_error"].as_str()),
        ]);
    }
    let mut out = t.render();
    if let Some(next) = next {
        out.push_str(&format!(
            "next: iohr reliability webhooks deliveries {id} --cursor {next}\n"
        ));
    }
    out
}
