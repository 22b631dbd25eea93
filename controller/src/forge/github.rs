//! GitHub's REST calls (API version 2022-11-28): the commit status
//! (`POST /repos/{owner}/{repo}/statuses/{sha}`) and the pull request's one comment, an
//! issue comment (`GET|POST /repos/{owner}/{repo}/issues/{n}/comments`,
//! `PATCH /repos/{owner}/{repo}/issues/comments/{id}`), found by its marker.

use hyper::Method;
use serde_json::json;

use super::Change;
use super::client::{CallError, Endpoint, Outgoing, USER_AGENT};
use super::report::{STATUS_CONTEXT, marker};

/// Comments listed per page (GitHub's most).
const PER_PAGE: u32 = 100;
/// Pages listed at most when looking for the marked comment.
pub const MAX_PAGES: u32 = 50;

/// GitHub's headers: its media type, the token, the API version, a `User-Agent`.
pub fn headers(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("accept", "application/vnd.github+json".to_string()),
        ("authorization", format!("Bearer {token}")),
        ("x-github-api-version", "2022-11-28".to_string()),
        ("user-agent", USER_AGENT.to_string()),
    ]
}

/// Sets the status on `commit` and writes the comment on a pull request; the comment's
/// id (to keep) when there is one.
pub async fn send_report(
    forge: &Endpoint<'_>,
    out: &Outgoing<'_>,
) -> Result<Option<String>, CallError> {
    let (change, report) = (out.change, out.report);
    if let Some(commit) = out.commit {
        let mut status = json!({
            "state": report.state.as_str(),
            "description": report.description,
            "context": STATUS_CONTEXT,
        });
        if let Some(url) = out.target_url {
            status["target_url"] = json!(url);
        }
        forge
            .call(
                Method::POST,
                &format!("/repos/{}/statuses/{commit}", change.repo),
                Some(status),
            )
            .await?;
    }
    let Some(number) = change.number else {
        return Ok(None);
    };
    let body = json!({ "body": report.comment });
    if let Some(id) = out
        .comment_id
        .filter(|id| id.chars().all(|c| c.is_ascii_digit()))
    {
        match edit(forge, change, id, &body).await {
            Ok(()) => return Ok(Some(id.to_string())),
            // Deleted by someone: looked for again, or written anew.
            Err(CallError::Status { code: 404, .. }) => {}
            Err(error) => return Err(error),
        }
    }
    let wanted = marker(out.change_ref);
    if let Some(id) = find(forge, change, number, &wanted).await? {
        edit(forge, change, &id, &body).await?;
        return Ok(Some(id));
    }
    let created = forge
        .call(
            Method::POST,
            &format!("/repos/{}/issues/{number}/comments", change.repo),
            Some(body),
        )
        .await?
        .json()?;
    id_of(&created).map(Some)
}

async fn edit(
    forge: &Endpoint<'_>,
    change: &Change,
    id: &str,
    body: &serde_json::Value,
) -> Result<(), CallError> {
    forge
        .call(
            Method::PATCH,
            &format!("/repos/{}/issues/comments/{id}", change.repo),
            Some(body.clone()),
        )
        .await
        .map(|_| ())
}

/// The id of the first comment holding `wanted`, paging through `Link`.
async fn find(
    forge: &Endpoint<'_>,
    change: &Change,
    number: u64,
    wanted: &str,
) -> Result<Option<String>, CallError> {
    let mut page = 1;
    for _ in 0..MAX_PAGES {
        let answer = forge
            .call(
                Method::GET,
                &format!(
                    "/repos/{}/issues/{number}/comments?per_page={PER_PAGE}&page={page}",
                    change.repo
                ),
                None,
            )
            .await?;
        let comments = answer.json()?;
        let comments = comments
            .as_array()
            .ok_or_else(|| CallError::BadAnswer("the comments are not a list".into()))?;
        for comment in comments {
            if comment["body"].as_str().is_some_and(|b| b.contains(wanted)) {
                return id_of(comment).map(Some);
            }
        }
        match answer.next_page {
            Some(next) if next > page => page = next,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// A comment's (or note's) numeric id.
pub fn id_of(object: &serde_json::Value) -> Result<String, CallError> {
    object["id"]
        .as_u64()
        .map(|id| id.to_string())
        .ok_or_else(|| CallError::BadAnswer("no numeric id".into()))
}
