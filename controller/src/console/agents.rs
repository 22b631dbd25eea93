//! The Agents page: each agent online or not, its version, environments, kinds, running
//! leases and last heartbeat.

use axum::extract::State;
use axum::response::IntoResponse;
use maud::html;
use serde_json::Value;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::short;
use super::session::Viewer;
use super::value::{joined, list, text, when};

pub async fn list_page(State(state): State<ConsoleState>, viewer: Viewer) -> PageResult {
    let answer = crate::api::agents::list(State(state.shared.clone()), viewer.caller()?)
        .await?
        .0;
    let answer = serde_json::to_value(answer).unwrap_or(Value::Null);
    let agents = list(&answer, "agents");
    let body = html! {
        table #agents {
            thead { tr { th { "Agent" } th { "State" } th { "Version" } th { "Environments" } th { "Kinds" }
                         th { "Jobs at once" } th { "Running" } th { "Last heartbeat" } } }
            tbody {
                @for a in agents {
                    @let state = if text(a, "online") == "true" { "online" } else if text(a, "last_seen_at").is_empty() { "offline" } else { "lost" };
                    tr data-agent-name=(text(a, "name")) data-state=(state) {
                        td { (text(a, "name")) }
                        td.state { (state) }
                        td { (text(a, "version")) }
                        td { (joined(a, "environments")) }
                        td { (joined(a, "kinds")) }
                        td { (text(a, "max_concurrent_jobs")) }
                        td {
                            @for lease in list(a, "running") {
                                @let run = text(lease, "run_id");
                                a href=(format!("/runs/{run}")) { (short(&run)) } " " (text(lease, "kind")) " (" (text(lease, "state")) ")" br;
                            }
                        }
                        td { (when(a, "last_seen_at")) }
                    }
                }
            }
        }
        @if agents.is_empty() { p.empty { "No agents (iohr-controller agent-cert, then iohr-agent run)." } }
    };
    Ok(page(Some(&viewer), "agents", "Agents", Extras::default(), body).into_response())
}
