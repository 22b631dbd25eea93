//! The tools: each one REST call (or a bounded series of them, for the wait) made with the
//! caller's `Authorization` header when the transport has one.

use std::sync::Arc;

use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use crate::frames::Frames;
use crate::inputs::{
    CompareRuns, ListAudit, ListFindings, ListRuns, ListScenarios, RunId, StartRun, WaitRun,
};
use crate::outputs::{Compared, Record, Waited};
use crate::rest::{Method, Rest, RestError, query, segment};

/// The MCP server handler; one per HTTP request (stateless) or per stdio connection.
#[derive(Clone)]
pub struct Tools {
    rest: Arc<dyn Rest>,
}

impl Tools {
    pub fn new(rest: Arc<dyn Rest>) -> Tools {
        Tools { rest }
    }

    pub(crate) async fn call(
        &self,
        ctx: &RequestContext<RoleServer>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Record, RestError> {
        let path = format!("/v1/reliability{path}");
        match self
            .rest
            .call(method, &path, body, authorization(ctx))
            .await?
        {
            Value::Object(record) => Ok(record),
            other => Err(RestError::new(
                "protocol",
                format!("{path} answered {other}, not an object"),
            )),
        }
    }

    /// A GET as a tool's answer.
    async fn get(
        &self,
        ctx: &RequestContext<RoleServer>,
        path: &str,
    ) -> Result<Json<Record>, CallToolResult> {
        self.call(ctx, Method::Get, path, None)
            .await
            .map(Json)
            .map_err(failed)
    }

    /// The live frames of `path` (`/runs/{id}/events`).
    pub(crate) async fn frames(
        &self,
        ctx: &RequestContext<RoleServer>,
        path: &str,
    ) -> Result<Frames, RestError> {
        let path = format!("/v1/reliability{path}");
        let body = self.rest.events(&path, authorization(ctx)).await?;
        Ok(Frames::new(body))
    }
}

/// The caller's `Authorization` header, when the transport is HTTP.
fn authorization(ctx: &RequestContext<RoleServer>) -> Option<&str> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get(http::header::AUTHORIZATION))
        .and_then(|value| value.to_str().ok())
}

/// The error result: `{"error": {"code", "message"}}` as REST shapes it.
pub(crate) fn failed(error: RestError) -> CallToolResult {
    CallToolResult::structured_error(
        json!({"error": {"code": error.code, "message": error.message}}),
    )
}

fn bad_input(message: String) -> CallToolResult {
    failed(RestError::new("invalid_input", message))
}

// Each tool answers `Result<Json<T>, CallToolResult>`, spelled out: the macro reads the
// return type's tokens to give the tool its output schema.
#[tool_router]
impl Tools {
    #[tool(
        description = "Start a reliability run (POST /v1/reliability/runs; needs the reliability:run scope). Give `spec` inline or a stored `scenario`. Answers the run record (status queued); follow it with reliability_wait_run."
    )]
    async fn reliability_start_run(
        &self,
        Parameters(start): Parameters<StartRun>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        let body = serde_json::to_value(&start).map_err(|e| bad_input(e.to_string()))?;
        self.call(&ctx, Method::Post, "/runs", Some(&body))
            .await
            .map(Json)
            .map_err(failed)
    }

    #[tool(description = "A run's record as it stands (GET /v1/reliability/runs/{id}).")]
    async fn reliability_get_run(
        &self,
        Parameters(RunId { id }): Parameters<RunId>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        self.get(&ctx, &format!("/runs/{}", segment(&id))).await
    }

    #[tool(
        description = "Wait for a run to end, at most `timeout_s` seconds (1 to 600, default 120); answers its record and `timed_out: true` when it is still queued or running. Sends progress notifications (the run's status and phase) when the request has a progress token."
    )]
    async fn reliability_wait_run(
        &self,
        Parameters(wait): Parameters<WaitRun>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Waited>, CallToolResult> {
        crate::wait::wait(self, wait, &ctx).await.map(Json)
    }

    #[tool(
        description = "What is different in the second run (GET /v1/reliability/compare): the verdict, the difference lines and the exit code `iohr reliability compare` would give (0 unchanged or improved, 1 regressed). Runs that cannot be compared are a tool error with the API's code (not_comparable, not_finished, generator_saturated when either run's load generator was saturated and the measure cannot be trusted; the CLI's exit code 2)."
    )]
    async fn reliability_compare_runs(
        &self,
        Parameters(compare): Parameters<CompareRuns>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Compared>, CallToolResult> {
        let path = format!(
            "/compare{}",
            query(&[
                ("before", Some(compare.before)),
                ("after", Some(compare.after)),
                ("noise_floor", compare.noise_floor.map(|f| f.to_string())),
            ])
        );
        let comparison = self
            .call(&ctx, Method::Get, &path, None)
            .await
            .map_err(failed)?;
        let verdict = comparison
            .get("verdict")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let differences = comparison
            .get("differences")
            .and_then(Value::as_array)
            .map(|lines| {
                lines
                    .iter()
                    .filter_map(|d| d.get("line").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let (exit_code, meaning) = match verdict.as_str() {
            "regressed" => (1, "regressed: the after run is worse"),
            _ => (0, "not worse: unchanged or improved"),
        };
        Ok(Json(Compared {
            verdict,
            differences,
            exit_code,
            meaning: meaning.to_string(),
            comparison,
        }))
    }

    #[tool(
        description = "The account's runs, newest first (GET /v1/reliability/runs): filter by status, kind, environment, agent; `limit` 1 to 500; page with `cursor` = the last page's `next_cursor`."
    )]
    async fn reliability_list_runs(
        &self,
        Parameters(list): Parameters<ListRuns>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        let path = format!(
            "/runs{}",
            query(&[
                ("status", list.status),
                ("kind", list.kind),
                ("environment", list.environment),
                ("agent", list.agent),
                ("limit", list.limit.map(|l| l.to_string())),
                ("cursor", list.cursor),
            ])
        );
        self.get(&ctx, &path).await
    }

    #[tool(
        description = "Problems runs found (GET /v1/reliability/findings), newest first: filter by status (open, closed), scenario, environment; `limit` 1 to 500; page with `cursor`."
    )]
    async fn reliability_list_findings(
        &self,
        Parameters(list): Parameters<ListFindings>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        let path = format!(
            "/findings{}",
            query(&[
                ("status", list.status),
                ("scenario", list.scenario),
                ("environment", list.environment),
                ("limit", list.limit.map(|l| l.to_string())),
                ("cursor", list.cursor),
            ])
        );
        self.get(&ctx, &path).await
    }

    #[tool(
        description = "Who did what (GET /v1/reliability/audit), newest first: starts, cancels, confirmations, finding closes, halts, schedule and webhook changes; filter by time (RFC 3339), actor, action, run, schedule; page with `cursor`. Needs a token with reliability:audit."
    )]
    async fn reliability_list_audit(
        &self,
        Parameters(list): Parameters<ListAudit>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        let path = format!(
            "/audit{}",
            query(&[
                ("since", list.since),
                ("until", list.until),
                ("actor", list.actor),
                ("action", list.action),
                ("run", list.run),
                ("schedule", list.schedule),
                ("limit", list.limit.map(|l| l.to_string())),
                ("cursor", list.cursor),
            ])
        );
        self.get(&ctx, &path).await
    }

    #[tool(
        description = "The account's agents (GET /v1/reliability/agents): online, environments, kinds, running jobs."
    )]
    async fn reliability_list_agents(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        self.get(&ctx, "/agents").await
    }

    #[tool(
        description = "The account's schedules (GET /v1/reliability/schedules): runs started by a cron expression in UTC, with each one's next fire times, skipped fires and last run."
    )]
    async fn reliability_list_schedules(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        self.get(&ctx, "/schedules").await
    }

    #[tool(
        description = "The account's scenario names (GET /v1/reliability/scenarios), in order: each with its kind, how many versions and the newest version, which reliability_start_run can name as `scenario` {id, version} to run it again; `limit` 1 to 500; page with `cursor`."
    )]
    async fn reliability_list_scenarios(
        &self,
        Parameters(list): Parameters<ListScenarios>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Record>, CallToolResult> {
        let path = format!(
            "/scenarios{}",
            query(&[
                ("limit", list.limit.map(|l| l.to_string())),
                ("cursor", list.cursor),
            ])
        );
        self.get(&ctx, &path).await
    }
}

#[tool_handler(name = "iohr")]
impl ServerHandler for Tools {
    // Written out (not the macro's `instructions`, a literal) so that the kinds named are
    // the registry's; otherwise what the macro would generate.
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
        .with_server_info(rmcp::model::Implementation::new(
            "iohr",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(instructions())
    }
}

/// What the server tells a client it is for.
fn instructions() -> String {
    format!(
        "iohr reliability: start {} runs against a target, wait for them, and compare two runs of one scenario (before and after a change). Calls have the REST API's scopes: reading needs reliability:read, starting a run reliability:run.",
        iohr_domain::RunKind::listed("and")
    )
}
