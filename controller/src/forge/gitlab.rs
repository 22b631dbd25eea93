//! GitLab's REST calls (API v4): the commit status (`POST /projects/:id/statuses/:sha`,
//! `name` `iohr/reliability`) and the merge request's one note
//! (`GET|POST /projects/:id/merge_requests/:iid/notes`, `PUT …/notes/:note_id`), found by
//! its marker; `:id` is the project's URL-encoded path.

use hyper::Method;
use serde_json::json;

use super::client::{CallError, Endpoint, Outgoing, USER_AGENT};
use super::github::{MAX_PAGES, id_of};
use super::report::{Report, STATUS_CONTEXT, State, marker};

/// Notes listed per page (GitLab's most).
const PER_PAGE: u32 = 100;

/// GitLab's headers: the token as `PRIVATE-TOKEN`, a `User-Agent`.
pub fn headers(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("private-token", token.to_string()),
        ("user-agent", USER_AGENT.to_string()),
    ]
}

/// A project's path as `:id` (its characters are checked by `parse_change`).
pub fn project_id(repo: &str) -> String {
    repo.replace('/', "%2F")
}

/// GitLab's word for a state: it has no `error` (a failed run is `failed`) and a
/// `canceled` of its own.
pub fn state(report: &Report) -> &'static str {
    match report.state {
        _ if report.cancelled => "canceled",
        State::Pending => "pending",
        State::Success => "success",
        State::Failure | State::Error => "failed",
    }
}

/// Sets the status on `commit` and writes the note on a merge request; the note's id
/// (to keep) when there is one.
pub async fn send_report(
    forge: &Endpoint<'_>,
    out: &Outgoing<'_>,
) -> Result<Option<String>, CallError> {
    let (change, report) = (out.change, out.report);
    let project = project_id(&change.repo);
    if let Some(commit) = out.commit {
        let mut status = json!({
            "state": state(report),
            "name": STATUS_CONTEXT,
            "description": report.description,
        });
        if let Some(url) = out.target_url {
            status["target_url"] = json!(url);
        }
        forge
            .call(
                Method::POST,
                &format!("/projects/{project}/statuses/{commit}"),
                Some(status),
            )
            .await?;
    }
    let Some(iid) = change.number else {
        return Ok(None);
    };
    let notes = format!("/projects/{project}/merge_requests/{iid}/notes");
    let body = json!({ "body": report.comment });
    if let Some(id) = out
        .comment_id
        .filter(|id| id.chars().all(|c| c.is_ascii_digit()))
    {
        match forge
            .call(Method::PUT, &format!("{notes}/{id}"), Some(body.clone()))
            .await
        {
            Ok(_) => return Ok(Some(id.to_string())),
            Err(CallError::Status { code: 404, .. }) => {}
            Err(error) => return Err(error),
        }
    }
    let wanted = marker(out.change_ref);
    let mut page = 1;
    for _ in 0..MAX_PAGES {
        let answer = forge
            .call(
                Method::GET,
                &format!("{notes}?sort=asc&order_by=created_at&per_page={PER_PAGE}&page={page}"),
                None,
            )
            .await?;
        let listed = answer.json()?;
        let listed = listed
            .as_array()
            .ok_or_else(|| CallError::BadAnswer("the notes are not a list".into()))?;
        if let Some(note) = listed
            .iter()
            .find(|n| n["body"].as_str().is_some_and(|b| b.contains(&wanted)))
        {
            let id = id_of(note)?;
            forge
                .call(Method::PUT, &format!("{notes}/{id}"), Some(body))
                .await?;
            return Ok(Some(id));
        }
        match answer.next_page {
            Some(next) if next > page => page = next,
            _ => break,
        }
    }
    let created = forge.call(Method::POST, &notes, Some(body)).await?.json()?;
    id_of(&created).map(Some)
}
