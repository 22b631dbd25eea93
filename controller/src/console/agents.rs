//! The Agents page: each agent online or not, its version, environments, kinds, running
//! leases and last heartbeat.

use axum::extract::State;
use axum::response::IntoResponse;
use maud::html;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::short;
use super::session::Viewer;
use super::value::short_time;
use crate::auth::ReadScope;

pub async fn list_page(State(state): State<ConsoleState>, viewer: Viewer) -> PageResult {
    let caller = viewer.caller::<ReadScope>()?;
    let agents = crate::resources::agents::list(&state.shared, caller.account_id())
        .await
        .map_err(crate::error::ApiError::from)?
        .agents;
    let body = html! {
        table #agents {
            thead { tr { th { "Agent" } th { "State" } th { "Version" } th { "Environments" } th { "Kinds" }
                         th { "Jobs at once" } th { "Running" } th { "Last heartbeat" } } }
            tbody {
                @for a in &agents {
                    @let state = if a.online { "online" } else if a.last_seen_at.as_deref().unwrap_or("").is_empty() { "offline" } else { "lost" };
                    tr data-agent-name=(a.name) data-state=(state) {
                        td { (a.name) }
                        td.state { (state) }
                        td { (a.version) }
                        td { (a.environments.join(", ")) }
                        td { (a.kinds.join(", ")) }
                        td { (a.max_concurrent_jobs) }
                        td {
                            @for lease in &a.running {
                                @let run = &lease.run_id;
                                a href=(format!("/runs/{run}")) { (short(run)) } " " (lease.kind) " (" (lease.state) ")" br;
                            }
                        }
                        td { (short_time(a.last_seen_at.as_deref().unwrap_or(""))) }
                    }
                }
            }
        }
        @if agents.is_empty() { p.empty { "No agents (iohr-controller agent-cert, then iohr-agent run)." } }
    };
    Ok(page(Some(&viewer), "agents", "Agents", Extras::default(), body).into_response())
}
