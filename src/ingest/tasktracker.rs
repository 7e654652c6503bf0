//! TaskTracker and task-attempt messages that start and end SALSA's Map, Reduce, ReduceCopy and
//! ReduceMergeCopy states (SALSA Table 1), as Hadoop 0.12–1.x words them. The reduce's copy and
//! merge messages are in the TaskTracker log up to 0.16 (through TaskRunner) and in the
//! attempt's `userlogs/<attempt>/syslog` from 0.18 on; both read the same.

use super::ids::{contains, find_attempt, is_map_attempt};
use super::states::{Detail, Outcome, StateKind, Token};

fn task(attempt: &str) -> Detail {
    Detail { task_id: Some(attempt.to_string()), ..Detail::default() }
}

fn task_kind(attempt: &str) -> StateKind {
    if is_map_attempt(attempt) { StateKind::Map } else { StateKind::Reduce }
}

fn task_end(attempt: &str, outcome: Outcome) -> Token {
    Token::End { kind: task_kind(attempt), key: format!("task:{attempt}"), outcome, detail: task(attempt) }
}

/// `<host>.` or `<host>` at the end of a copy message.
fn host_after_from(rest: &str) -> Option<String> {
    let (_, host) = rest.rsplit_once(" from ")?;
    let host = host.trim().trim_end_matches('.');
    (!host.is_empty()).then(|| host.to_string())
}

pub fn recognize(msg: &str) -> Option<Token> {
    // `LaunchTaskAction: <id>` (≤0.18) and `LaunchTaskAction (registerTask): <id> task's state:…`.
    if let Some(rest) = msg.strip_prefix("LaunchTaskAction") {
        let (attempt, _) = find_attempt(rest)?;
        return Some(Token::Start {
            kind: task_kind(attempt),
            key: format!("task:{attempt}"),
            detail: task(attempt),
        });
    }
    if let Some(rest) = msg.strip_prefix("Task ")
        && let Some(attempt) = rest.strip_suffix(" is done.")
    {
        return find_attempt(attempt).map(|(a, _)| task_end(a, Outcome::Succeeded));
    }
    if let Some(rest) = msg.strip_prefix("Received KillTaskAction for task: ") {
        return find_attempt(rest).map(|(a, _)| task_end(a, Outcome::Killed));
    }
    // FSError and fatal errors reported by the child: `Task: <id> - Killed …`.
    if let Some(rest) = msg.strip_prefix("Task: ")
        && contains(rest, " - Killed")
    {
        return find_attempt(rest).map(|(a, _)| task_end(a, Outcome::Failed));
    }
    // The remaining messages open with the attempt they are about.
    if !(msg.starts_with("attempt_") || msg.starts_with("task_")) {
        return None;
    }
    let (attempt, rest) = find_attempt(msg)?;
    let timed_out = rest.starts_with(": Task ") && contains(rest, " failed to report status for ");
    if timed_out || rest.starts_with(" Child Error") {
        return Some(task_end(attempt, Outcome::Failed));
    }
    let copy = |rest: &str, outcome: Option<Outcome>| -> Option<Token> {
        let (map, _) = find_attempt(rest)?;
        let detail = Detail {
            task_id: Some(attempt.to_string()),
            peer_task_id: Some(map.to_string()),
            peer_host: host_after_from(rest),
            ..Detail::default()
        };
        let key = format!("copy:{attempt}:{map}");
        Some(match outcome {
            None => Token::Start { kind: StateKind::ReduceCopy, key, detail },
            Some(outcome) => Token::End { kind: StateKind::ReduceCopy, key, outcome, detail },
        })
    };
    if let Some(rest) = rest.strip_prefix(" Copying ") {
        return copy(rest, None);
    }
    if let Some(rest) = rest.strip_prefix(" done copying ") {
        return copy(rest, Some(Outcome::Succeeded));
    }
    if let Some(rest) = rest.strip_prefix(" copy failed: ") {
        return copy(rest, Some(Outcome::Failed));
    }
    let merge_key = || format!("merge:{attempt}");
    if rest.starts_with(" Thread started: Thread for merging in memory files") {
        return Some(Token::Start { kind: StateKind::ReduceMergeCopy, key: merge_key(), detail: task(attempt) });
    }
    // 0.18 `Merge of the 3 files in InMemoryFileSystem complete. Local file is …`; 0.20 `Merge
    // of the 3 files in-memory complete. Local file is …`.
    if rest.starts_with(" Merge of the ")
        && (contains(rest, " files in InMemoryFileSystem complete") || contains(rest, " files in-memory complete"))
    {
        return Some(Token::End {
            kind: StateKind::ReduceMergeCopy,
            key: merge_key(),
            outcome: Outcome::Succeeded,
            detail: task(attempt),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: &str = "attempt_200808231712_0001_r_000002_0";
    const M: &str = "attempt_200808231712_0001_m_000001_0";

    #[test]
    fn task_starts_and_ends() {
        assert!(matches!(
            recognize("LaunchTaskAction: task_0001_m_000003_0"),
            Some(Token::Start { kind: StateKind::Map, .. })
        ));
        let start = recognize(&format!("LaunchTaskAction (registerTask): {R} task's state:UNASSIGNED")).unwrap();
        assert_eq!(start, Token::Start { kind: StateKind::Reduce, key: format!("task:{R}"), detail: task(R) });
        assert_eq!(recognize(&format!("Task {M} is done.")), Some(task_end(M, Outcome::Succeeded)));
        assert_eq!(recognize(&format!("Received KillTaskAction for task: {M}")), Some(task_end(M, Outcome::Killed)));
        assert_eq!(
            recognize(&format!("{M}: Task {M} failed to report status for 600 seconds. Killing!")),
            Some(task_end(M, Outcome::Failed))
        );
        assert_eq!(recognize(&format!("{M} Child Error")), Some(task_end(M, Outcome::Failed)));
        assert_eq!(recognize(&format!("{M} 0.6666667% hdfs://x/part-0:0+67108864")), None);
    }

    #[test]
    fn copies_and_merges() {
        let Some(Token::Start { kind, key, detail }) =
            recognize(&format!("{R} Copying {M} output from fp30.pdl.cmu.local."))
        else {
            panic!("no start")
        };
        assert_eq!((kind, key.as_str()), (StateKind::ReduceCopy, format!("copy:{R}:{M}").as_str()));
        assert_eq!(detail.peer_host.as_deref(), Some("fp30.pdl.cmu.local"));
        assert_eq!(detail.peer_task_id.as_deref(), Some(M));
        assert!(matches!(
            recognize(&format!("{R} done copying {M} output from fp30.pdl.cmu.local.")),
            Some(Token::End { kind: StateKind::ReduceCopy, outcome: Outcome::Succeeded, .. })
        ));
        assert!(matches!(
            recognize(&format!("{R} Thread started: Thread for merging in memory files")),
            Some(Token::Start { kind: StateKind::ReduceMergeCopy, .. })
        ));
        for end in [
            format!("{R} Merge of the 3 files in InMemoryFileSystem complete. Local file is /tmp/map_0.out"),
            format!("{R} Merge of the 3 files in-memory complete. Local file is /tmp/x of size 10"),
        ] {
            assert!(matches!(recognize(&end), Some(Token::End { kind: StateKind::ReduceMergeCopy, .. })));
        }
    }
}
