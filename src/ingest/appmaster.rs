//! The MapReduce application master's messages (Hadoop 2.x and 3.x, YARN) that start and end
//! the Map and Reduce states of SALSA Table 1. The worded forms are `TaskAttemptImpl`'s, the same
//! from 2.2 to 3.4:
//! - `TaskAttempt: [<attempt>] using containerId: [<container> on NM: [<host>:<port>]`, when
//!   the attempt is handed its container: the start, as the TaskTracker's `LaunchTaskAction` is
//!   in 0.x–1.x, and the only line that names the node the attempt runs on;
//! - `<attempt> TaskAttempt Transitioned from <state> to <state>`: the end is the first move out
//!   of `ASSIGNED`, `RUNNING` or `COMMIT_PENDING` to a success, failure or kill (its clean-up
//!   states included: 2.x `SUCCESS_CONTAINER_CLEANUP`, 2.8+ `SUCCESS_FINISHING_CONTAINER`).
//!
//! The log is the application master's, not the node's: a state's host is the node its line
//! names ([`node_of`]).

use super::ids::{find_attempt, split_at_first};
use super::states::{Outcome, Token};
use super::tasktracker::{task, task_end, task_key, task_kind};

const CONTAINER: &str = "] using containerId: [";
const ON_NM: &str = " on NM: [";

/// The node a `using containerId` message names, without its port.
pub fn node_of(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("TaskAttempt: [")?;
    let (_, node) = split_at_first(rest, ON_NM)?;
    let node = node.strip_suffix(']').unwrap_or(node);
    let host = node.rsplit_once(':').map_or(node, |(host, _)| host);
    (!host.is_empty()).then_some(host)
}

pub fn recognize(message: &str) -> Option<Token> {
    if let Some(rest) = message.strip_prefix("TaskAttempt: [") {
        let (attempt, _) = split_at_first(rest, CONTAINER)?;
        let (attempt, _) = find_attempt(attempt)?;
        node_of(message)?;
        return Some(Token::Start { kind: task_kind(attempt), key: task_key(attempt), detail: task(attempt) });
    }
    let (attempt, transition) = split_at_first(message, " TaskAttempt Transitioned from ")?;
    let (from, to) = transition.split_once(" to ")?;
    if !matches!(from, "ASSIGNED" | "RUNNING" | "COMMIT_PENDING") {
        return None;
    }
    let outcome = match to.split('_').next()? {
        "SUCCESS" | "SUCCEEDED" => Outcome::Succeeded,
        "FAIL" | "FAILED" => Outcome::Failed,
        "KILL" | "KILLED" => Outcome::Killed,
        _ => return None,
    };
    let (attempt, _) = find_attempt(attempt)?;
    Some(task_end(attempt, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::states::{Detail, StateKind};

    const MAP: &str = "attempt_1445144423722_0020_m_000000_0";

    #[test]
    fn the_container_line_starts_the_attempt_and_names_its_node() {
        let line = format!(
            "TaskAttempt: [{MAP}] using containerId: [container_1445144423722_0020_01_000002 on NM: [04DN8IQ.fareast.corp.microsoft.com:54883]"
        );
        assert_eq!(node_of(&line), Some("04DN8IQ.fareast.corp.microsoft.com"));
        let detail = Detail { task_id: Some(MAP.into()), ..Detail::default() };
        assert_eq!(recognize(&line), Some(Token::Start { kind: StateKind::Map, key: format!("task:{MAP}"), detail }));
        assert_eq!(node_of("TaskAttempt: [x] using containerId: [c on NM: []"), None);
    }

    #[test]
    fn the_first_move_out_of_a_running_state_ends_it() {
        let reduce = "attempt_1445144423722_0020_r_000000_0";
        let moves = [
            (MAP, "ASSIGNED", "RUNNING", None),
            (MAP, "RUNNING", "SUCCESS_CONTAINER_CLEANUP", Some(Outcome::Succeeded)),
            (MAP, "RUNNING", "SUCCESS_FINISHING_CONTAINER", Some(Outcome::Succeeded)),
            (MAP, "SUCCESS_CONTAINER_CLEANUP", "SUCCEEDED", None),
            (MAP, "RUNNING", "FAIL_CONTAINER_CLEANUP", Some(Outcome::Failed)),
            (MAP, "FAIL_TASK_CLEANUP", "FAILED", None),
            (reduce, "COMMIT_PENDING", "KILL_CONTAINER_CLEANUP", Some(Outcome::Killed)),
            (reduce, "RUNNING", "COMMIT_PENDING", None),
            (reduce, "UNASSIGNED", "KILLED", None),
            (reduce, "SUCCEEDED", "FAILED", None),
        ];
        for (attempt, from, to, outcome) in moves {
            let line = format!("{attempt} TaskAttempt Transitioned from {from} to {to}");
            let kind = if attempt == MAP { StateKind::Map } else { StateKind::Reduce };
            let expected = outcome.map(|outcome| Token::End {
                kind,
                key: format!("task:{attempt}"),
                outcome,
                detail: Detail { task_id: Some(attempt.into()), ..Detail::default() },
            });
            assert_eq!(recognize(&line), expected, "{line}");
        }
        assert_eq!(recognize("job_1445144423722_0020Job Transitioned from NEW to INITED"), None);
    }
}
