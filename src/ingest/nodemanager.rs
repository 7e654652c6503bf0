//! A YARN NodeManager's container transitions (Hadoop 2.x and 3.x `ContainerImpl`:
//! `Container <container> transitioned from <state> to <state>`) as states of the node: a
//! container's localization (LOCALIZING: its job's files fetched to the node) and its run
//! (RUNNING, entered from LOCALIZED, or from SCHEDULED in 3.x), each from the move into it to
//! the move out of it to an outcome (a paused or re-initialised container's run goes on). The
//! container is the state's `task_id`.

use super::ids::split_at_first;
use super::states::{Detail, Outcome, StateKind, Token};

pub fn recognize(message: &str) -> Option<Token> {
    let rest = message.strip_prefix("Container ")?;
    let (container, transition) = split_at_first(rest, " transitioned from ")?;
    let (from, to) = transition.split_once(" to ")?;
    let token = |kind: StateKind, outcome: Option<Outcome>| {
        let name = match kind {
            StateKind::ContainerLocalizing => "localizing",
            _ => "running",
        };
        let key = [name, container].join(":");
        let detail = Detail { task_id: Some(container.to_string()), ..Detail::default() };
        Some(match outcome {
            None => Token::Start { kind, key, detail },
            Some(outcome) => Token::End { kind, key, outcome, detail },
        })
    };
    match (from, to) {
        (_, "LOCALIZING") => token(StateKind::ContainerLocalizing, None),
        // 2.x moves on to LOCALIZED, 3.x to SCHEDULED.
        ("LOCALIZING", "LOCALIZED" | "SCHEDULED") => token(StateKind::ContainerLocalizing, Some(Outcome::Succeeded)),
        ("LOCALIZING", "LOCALIZATION_FAILED") => token(StateKind::ContainerLocalizing, Some(Outcome::Failed)),
        ("LOCALIZING", "KILLING") => token(StateKind::ContainerLocalizing, Some(Outcome::Killed)),
        (_, "RUNNING") => token(StateKind::ContainerRunning, None),
        ("RUNNING", "EXITED_WITH_SUCCESS") => token(StateKind::ContainerRunning, Some(Outcome::Succeeded)),
        ("RUNNING", "EXITED_WITH_FAILURE") => token(StateKind::ContainerRunning, Some(Outcome::Failed)),
        ("RUNNING", "KILLING") => token(StateKind::ContainerRunning, Some(Outcome::Killed)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_in_and_out_of_localizing_and_running_open_and_close_states() {
        let c = "container_e17_1553147085057_0001_01_000002";
        let detail = || Detail { task_id: Some(c.into()), ..Detail::default() };
        let start = |kind, key: &str| Some(Token::Start { kind, key: format!("{key}:{c}"), detail: detail() });
        let end =
            |kind, key: &str, outcome| Some(Token::End { kind, key: format!("{key}:{c}"), outcome, detail: detail() });
        let cases = [
            ("NEW", "LOCALIZING", start(StateKind::ContainerLocalizing, "localizing")),
            ("LOCALIZING", "LOCALIZED", end(StateKind::ContainerLocalizing, "localizing", Outcome::Succeeded)),
            ("LOCALIZING", "SCHEDULED", end(StateKind::ContainerLocalizing, "localizing", Outcome::Succeeded)),
            ("LOCALIZING", "LOCALIZATION_FAILED", end(StateKind::ContainerLocalizing, "localizing", Outcome::Failed)),
            ("LOCALIZED", "RUNNING", start(StateKind::ContainerRunning, "running")),
            ("SCHEDULED", "RUNNING", start(StateKind::ContainerRunning, "running")),
            ("RUNNING", "EXITED_WITH_SUCCESS", end(StateKind::ContainerRunning, "running", Outcome::Succeeded)),
            ("RUNNING", "EXITED_WITH_FAILURE", end(StateKind::ContainerRunning, "running", Outcome::Failed)),
            ("RUNNING", "KILLING", end(StateKind::ContainerRunning, "running", Outcome::Killed)),
            ("EXITED_WITH_SUCCESS", "DONE", None),
            ("LOCALIZED", "SCHEDULED", None),
            ("RUNNING", "PAUSING", None),
        ];
        for (from, to, expected) in cases {
            let line = format!("Container {c} transitioned from {from} to {to}");
            assert_eq!(recognize(&line), expected, "{line}");
        }
        assert_eq!(recognize("Container c transitioned to RUNNING"), None);
    }
}
