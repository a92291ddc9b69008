//! Plan files (`swarm plan -o PLAN.json`, `swarm run PLAN.json`): written whole, read
//! defensively. A plan file may come from anywhere, so reading one checks everything the
//! types do not ([`super::Plan::validate`]) and that its base commit is here.

use std::path::Path;

use git2::{Oid, Repository};

use super::{PLAN_SCHEMA_VERSION, Plan, PlanError};

/// Reads a plan file, refusing what is not a valid plan.
pub(crate) fn read(path: &Path) -> Result<Plan, PlanError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlanError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    let not_a_plan = |e: serde_json::Error| PlanError::NotAPlan {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    // The version first: another version's fields are not this one's.
    let value: serde_json::Value = serde_json::from_str(&text).map_err(not_a_plan)?;
    if let Some(found) = value.get("schema_version").and_then(|v| v.as_u64())
        && found != u64::from(PLAN_SCHEMA_VERSION)
    {
        return Err(PlanError::Schema {
            path: path.to_path_buf(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
        });
    }
    let plan: Plan = serde_json::from_value(value).map_err(not_a_plan)?;
    plan.validate().map_err(|message| PlanError::Invalid {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(plan)
}

/// Writes `plan` to `path` (pretty JSON); returns the text written.
pub(crate) fn write(plan: &Plan, path: &Path) -> Result<String, PlanError> {
    let text = serde_json::to_string_pretty(plan).map_err(anyhow::Error::from)? + "\n";
    std::fs::write(path, crate::secrets::redact(&text).as_bytes()).map_err(|source| {
        PlanError::Unwritable {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok(text)
}

/// The plan's base commit, which must be in `repo`.
pub(crate) fn base(repo: &Repository, plan: &Plan) -> Result<Oid, PlanError> {
    match repo.find_commit(plan.base) {
        Ok(_) => Ok(plan.base),
        Err(_) => Err(PlanError::BaseMissing(plan.base.to_string())),
    }
}
