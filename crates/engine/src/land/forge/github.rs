//! GitHub's REST API: pull requests (`/repos/{owner}/{repo}/pulls`) and their reviewers.

use reqwest::Method;
use serde_json::{Value, json};

use super::{
    Forge, ForgeError, NewRequest, PrState, PullRequest, first_request, plain_name, read_request,
};

/// Where GitHub's answers hold a pull request's number and web URL.
const FIELDS: [&str; 2] = ["number", "html_url"];

fn state_of(value: &Value) -> PrState {
    let merged = value["merged"].as_bool() == Some(true) || value["merged_at"].is_string();
    match (value["state"].as_str(), merged) {
        (_, true) => PrState::Merged,
        (Some("open"), false) => PrState::Open,
        _ => PrState::Closed,
    }
}

pub(super) async fn find(forge: &Forge, head: &str) -> Result<Option<PullRequest>, ForgeError> {
    let owner = forge.repo.split('/').next().unwrap_or_default();
    let path = format!("/repos/{}/pulls", forge.repo);
    let head = format!("{owner}:{head}");
    let query = [
        ("head", head.as_str()),
        ("state", "all"),
        ("per_page", "100"),
    ];
    let answer = forge.call(Method::GET, &path, &query, None).await?;
    first_request(&answer, FIELDS, state_of, &format!("GET {path}"))
}

pub(super) async fn open(
    forge: &Forge,
    new: &NewRequest<'_>,
) -> Result<(PullRequest, Vec<String>), ForgeError> {
    let path = format!("/repos/{}/pulls", forge.repo);
    let body = json!({
        "title": new.title,
        "head": new.head,
        "base": new.base,
        "body": new.body,
    });
    let answer = forge.call(Method::POST, &path, &[], Some(&body)).await?;
    let pull = read_request(&answer, FIELDS, state_of, &format!("POST {path}"))?;
    let warnings = ask_reviewers(forge, pull.number, new.owners).await;
    Ok((pull, warnings))
}

/// Asks the owners to review: `@user` as reviewers, `@org/team` as team reviewers; an email
/// cannot be asked. What GitHub refuses (an owner who is not a collaborator) is a warning.
async fn ask_reviewers(forge: &Forge, number: u64, owners: &[String]) -> Vec<String> {
    let mut warnings = Vec::new();
    let (mut users, mut teams) = (Vec::new(), Vec::new());
    for owner in owners {
        match owner.strip_prefix('@').map(|o| o.split_once('/')) {
            Some(Some((_, team))) if plain_name(team) => teams.push(team.to_string()),
            Some(None) if plain_name(&owner[1..]) => users.push(owner[1..].to_string()),
            _ => warnings.push(format!("{owner} cannot be asked to review on GitHub")),
        }
    }
    if users.is_empty() && teams.is_empty() {
        return warnings;
    }
    let path = format!("/repos/{}/pulls/{number}/requested_reviewers", forge.repo);
    let body = json!({ "reviewers": users, "team_reviewers": teams });
    if let Err(e) = forge.call(Method::POST, &path, &[], Some(&body)).await {
        warnings.push(format!("reviewers not requested on #{number}: {e}"));
    }
    warnings
}

pub(super) async fn state(forge: &Forge, number: u64) -> Result<PrState, ForgeError> {
    let path = format!("/repos/{}/pulls/{number}", forge.repo);
    let answer = forge.call(Method::GET, &path, &[], None).await?;
    Ok(state_of(&answer))
}
