//! GitLab's REST API v4: merge requests (`/projects/:id/merge_requests`), the project named
//! by its URL-encoded path, reviewers by their user ids.

use reqwest::Method;
use serde_json::{Value, json};

use super::{
    Forge, ForgeError, NewRequest, PrState, PullRequest, encode_component, first_request,
    plain_name, read_request,
};

fn project(forge: &Forge) -> String {
    format!("/projects/{}", encode_component(&forge.repo))
}

/// Where GitLab's answers hold a merge request's number and web URL.
const FIELDS: [&str; 2] = ["iid", "web_url"];

fn state_of(value: &Value) -> PrState {
    match value["state"].as_str() {
        Some("merged") => PrState::Merged,
        Some("opened" | "locked") => PrState::Open,
        _ => PrState::Closed,
    }
}

pub(super) async fn find(forge: &Forge, head: &str) -> Result<Option<PullRequest>, ForgeError> {
    let path = format!("{}/merge_requests", project(forge));
    let query = [("source_branch", head), ("state", "all")];
    let answer = forge.call(Method::GET, &path, &query, None).await?;
    first_request(&answer, FIELDS, state_of, &format!("GET {path}"))
}

pub(super) async fn open(
    forge: &Forge,
    new: &NewRequest<'_>,
) -> Result<(PullRequest, Vec<String>), ForgeError> {
    let (reviewer_ids, warnings) = reviewers(forge, new.owners).await;
    let path = format!("{}/merge_requests", project(forge));
    let body = json!({
        "source_branch": new.head,
        "target_branch": new.base,
        "title": new.title,
        "description": new.body,
        "reviewer_ids": reviewer_ids,
    });
    let answer = forge.call(Method::POST, &path, &[], Some(&body)).await?;
    let pull = read_request(&answer, FIELDS, state_of, &format!("POST {path}"))?;
    Ok((pull, warnings))
}

/// The user ids of the owners who are users (`@name`); groups and emails cannot be asked.
async fn reviewers(forge: &Forge, owners: &[String]) -> (Vec<u64>, Vec<String>) {
    let mut ids = Vec::new();
    let mut warnings = Vec::new();
    for owner in owners {
        let name = owner.strip_prefix('@').filter(|n| plain_name(n));
        let Some(name) = name else {
            warnings.push(format!("{owner} cannot be asked to review on GitLab"));
            continue;
        };
        let found = forge
            .call(Method::GET, "/users", &[("username", name)], None)
            .await
            .map(|users| {
                users
                    .as_array()
                    .and_then(|u| u.first())
                    .and_then(|u| u["id"].as_u64())
            });
        match found {
            Ok(Some(id)) => ids.push(id),
            Ok(None) => warnings.push(format!("{owner}: no such GitLab user")),
            Err(e) => warnings.push(format!("{owner}: {e}")),
        }
    }
    (ids, warnings)
}

pub(super) async fn state(forge: &Forge, number: u64) -> Result<PrState, ForgeError> {
    let path = format!("{}/merge_requests/{number}", project(forge));
    let answer = forge.call(Method::GET, &path, &[], None).await?;
    Ok(state_of(&answer))
}
