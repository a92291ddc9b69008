//! What the allow-list proxy tells the run: each connection a confined process asked for
//! becomes a `network` event, and counts in its task's report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::events::{Event, EventSink, NetworkVerdict};
use crate::ids::TaskId;
use crate::report::NetworkUse;
use swarm_sandbox::proxy::{Access, OnAccess};

/// The connections of each task so far in this run (until its attempt takes them).
#[derive(Default)]
pub(super) struct NetworkLog {
    by_task: Mutex<HashMap<TaskId, NetworkUse>>,
}

impl NetworkLog {
    /// What `task`'s processes asked for since the last call.
    pub(super) fn take(&self, task: &TaskId) -> NetworkUse {
        let mut by_task = self.by_task.lock().unwrap_or_else(|e| e.into_inner());
        by_task.remove(task).unwrap_or_default()
    }

    fn record(&self, task: &TaskId, access: &Access) {
        let mut by_task = self.by_task.lock().unwrap_or_else(|e| e.into_inner());
        let used = by_task.entry(task.clone()).or_default();
        if access.allowed {
            used.allowed += 1;
        } else {
            used.refused += 1;
            let host = format!("{}:{}", access.host, access.port);
            if !used.refused_hosts.contains(&host) {
                used.refused_hosts.push(host);
            }
        }
    }
}

/// The proxy's reporter for processes of `task` (none: the run's own, `--verify-merged`).
pub(super) fn on_access(
    log: &Arc<NetworkLog>,
    sink: &Arc<EventSink>,
    task: Option<&TaskId>,
) -> OnAccess {
    let (log, sink, task) = (log.clone(), sink.clone(), task.cloned());
    Arc::new(move |access: &Access| {
        sink.emit(Event::Network {
            task: task.clone(),
            domain: access.host.clone(),
            port: access.port,
            verdict: if access.allowed {
                NetworkVerdict::Allowed
            } else {
                NetworkVerdict::Refused
            },
        });
        if let Some(task) = &task {
            log.record(task, access);
        }
    })
}
