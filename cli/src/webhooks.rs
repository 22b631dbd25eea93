//! `iohr reliability webhooks create|list|deliveries|redeliver|delete`: the account's
//! webhook subscriptions and their delivery logs.

use clap::Subcommand;
use serde_json::{Value, json};

use crate::client::segment;
use crate::error::Result;
use crate::output::{Table, emit, emit_json, or_dash};
use crate::{Ctx, page};

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
    /// The account's subscriptions, in the order of their ids.
    List {
        /// At most this many subscriptions on the page.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// The `next_cursor` of the previous page.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
    },
    /// A subscription's delivery log, newest event first.
    Deliveries {
        /// The subscription's id.
        id: String,
        /// At most this many deliveries on the page.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// The `next_cursor` of the previous page.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
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

const LISTING: page::Listing = page::Listing {
    path: "/v1/reliability/webhooks",
    field: "webhooks",
    none: "no webhooks\n",
    command: "iohr reliability webhooks list",
};

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
        WebhooksCommand::List { limit, cursor } => {
            let filters = [("limit", limit.map(|n| n.to_string()))];
            return page::list(ctx, &LISTING, &filters, cursor, |hooks, next, filters| {
                page::render(&LISTING, hooks, render_hooks, next, filters)
            })
            .await;
        }
        WebhooksCommand::Deliveries { id, limit, cursor } => {
            let (path, command) = deliveries_of(&id)?;
            let listing = deliveries_listing(&path, &command);
            let filters = [("limit", limit.map(|n| n.to_string()))];
            return page::list(ctx, &listing, &filters, cursor, |rows, next, filters| {
                page::render(&listing, rows, render_deliveries, next, filters)
            })
            .await;
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

/// The path and the command of one subscription's delivery log.
fn deliveries_of(id: &str) -> Result<(String, String)> {
    Ok((
        format!("{}/deliveries", hook_path(id)?),
        format!(
            "iohr reliability webhooks deliveries {}",
            page::shell_word(id)
        ),
    ))
}

fn deliveries_listing<'a>(path: &'a str, command: &'a str) -> page::Listing<'a> {
    page::Listing {
        path,
        field: "deliveries",
        none: "no deliveries\n",
        command,
    }
}

fn render_deliveries(rows: &[Value]) -> String {
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
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_of_deliveries_names_its_subscription_in_the_next_line() {
        let (path, command) = deliveries_of("wh_1").unwrap();
        assert_eq!(path, "/v1/reliability/webhooks/wh_1/deliveries");
        let listing = deliveries_listing(&path, &command);
        let rows = [
            json!({"event_id": "evt_9", "event_type": "reliability.run.finished",
            "status": "delivered", "attempts": 1, "last_status_code": 204}),
        ];
        let filters = [("limit", Some("1".to_string()))];
        let text = page::render(&listing, &rows, render_deliveries, Some("9"), &filters);
        assert!(text.contains("evt_9"), "{text}");
        assert!(
            text.ends_with(
                "next: iohr reliability webhooks deliveries wh_1 --cursor 9 --limit 1\n"
            ),
            "{text}"
        );
        assert_eq!(
            page::render(&listing, &[], render_deliveries, None, &filters),
            "no deliveries\n"
        );
    }
}
