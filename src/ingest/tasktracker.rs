//! TaskTracker and task-attempt messages that start and end SALSA's Map, Reduce, ReduceCopy and
//! ReduceMergeCopy states (SALSA Table 1), as Hadoop 0.12–1.x words them. The reduce's copy and
//! merge messages are in the TaskTracker log up to 0.16 (through TaskRunner) and in the
//! attempt's `userlogs/<attempt>/syslog` from 0.18 on; both read the same. From 0.19 on the
//! copier threads name only the map whose output they fetch, so the reduce is the attempt whose
//! log it is.

use super::ids::{contains, find_attempt, host_of_address, is_map_attempt, split_at_first, split_at_last};
use super::states::{Detail, Outcome, StateKind, Token};

pub(super) fn task(attempt: &str) -> Detail {
    Detail { task_id: Some(attempt.to_string()), ..Detail::default() }
}

pub(super) fn task_kind(attempt: &str) -> StateKind {
    if is_map_attempt(attempt) { StateKind::Map } else { StateKind::Reduce }
}

pub(super) fn task_end(attempt: &str, outcome: Outcome) -> Token {
    Token::End { kind: task_kind(attempt), key: task_key(attempt), outcome, detail: task(attempt) }
}

/// The task attempt's own run, from its launch to its end. Keys are joined, not `format!`ed:
/// one is made for almost every line a TaskTracker writes.
pub(super) fn task_key(attempt: &str) -> String {
    ["task", attempt].join(":")
}

/// `<host>.` or `<host>` at the end of a copy message.
fn host_after_from(rest: &str) -> Option<String> {
    let (_, host) = split_at_last(rest, " from ")?;
    let host = host.trim().trim_end_matches('.');
    (!host.is_empty()).then(|| host.to_string())
}

/// The ReduceCopy of `reduce` fetching `map`'s output.
fn copy_key(reduce: &str, map: &str) -> String {
    ["copy", reduce, map].join(":")
}

/// `msg` from the log of attempt `own` (`userlogs/<attempt>/syslog`), as 0.19–1.x copier
/// threads write it. A fetch opens with `Shuffling 1234 bytes (567 raw bytes) into RAM from <map>`
/// (or `into Local-FS`; INFO in 0.19–0.20, DEBUG in 1.x) and ends with `Read 1234 bytes from
/// map-output for <map>`; a fetch into memory then logs `Rec #1 from <map> -> (12, 40) from
/// <host>`, the only line that names the map's host. Failures (`copy failed: <map> from <host>`)
/// name the reduce themselves.
fn recognize_own(msg: &str, own: &str) -> Option<Token> {
    let detail = |map: &str, peer_host: Option<String>, bytes: Option<i64>| Detail {
        task_id: Some(own.to_string()),
        peer_task_id: Some(map.to_string()),
        peer_host,
        bytes,
        ..Detail::default()
    };
    if let Some(rest) = msg.strip_prefix("Shuffling ") {
        let (_, map) = split_at_first(rest, " from ")?;
        let (map, _) = find_attempt(map)?;
        // The raw (compressed) length is what crosses the network.
        let raw =
            split_at_first(rest, " bytes (").and_then(|(_, r)| r.split_once(' ')).and_then(|(n, _)| n.parse().ok());
        return Some(Token::Start {
            kind: StateKind::ReduceCopy,
            key: copy_key(own, map),
            detail: detail(map, None, raw),
        });
    }
    // 2.x–3.x (YARN) fetchers: `fetcher#1 about to shuffle output of map <map> decomp: 1048
    // len: 1052 to MEMORY` (or `DISK`; `localfetcher#1` in local mode) opens the fetch, which
    // the same `Read … bytes from map-output for <map>` ends. The map's host is the fetcher's
    // ([`FetcherHosts`]).
    if let Some((_, rest)) = split_at_first(msg, "fetcher#")
        && let Some((_, rest)) = split_at_first(rest, " about to shuffle output of map ")
    {
        let (map, rest) = find_attempt(rest)?;
        let len = split_at_first(rest, " len: ").and_then(|(_, r)| r.split(' ').next()?.parse().ok());
        return Some(Token::Start {
            kind: StateKind::ReduceCopy,
            key: copy_key(own, map),
            detail: detail(map, None, len),
        });
    }
    if let Some(rest) = msg.strip_prefix("Read ")
        && let Some((_, map)) = split_at_first(rest, " bytes from map-output for ")
    {
        let (map, _) = find_attempt(map)?;
        return Some(Token::End {
            kind: StateKind::ReduceCopy,
            key: copy_key(own, map),
            outcome: Outcome::Succeeded,
            detail: detail(map, None, None),
        });
    }
    // 2.x–3.x: a fetch that breaks off (`Failed to shuffle output of <map> from <host>`, WARN,
    // with the exception below it).
    if let Some(rest) = msg.strip_prefix("Failed to shuffle output of ") {
        let (map, rest) = find_attempt(rest)?;
        let host = rest.strip_prefix(" from ").map(|h| h.trim().to_string()).filter(|h| !h.is_empty());
        return Some(Token::End {
            kind: StateKind::ReduceCopy,
            key: copy_key(own, map),
            outcome: Outcome::Failed,
            detail: detail(map, host, None),
        });
    }
    if let Some(rest) = msg.strip_prefix("Rec #1 from ") {
        let (map, _) = find_attempt(rest)?;
        return Some(Token::Amend { key: copy_key(own, map), detail: detail(map, host_after_from(rest), None) });
    }
    // 0.19–1.x: the merge thread, started once (`Thread started`, below), logs this without
    // the attempt at each merge; the merge's `Merge of the N files in-memory complete` ends it.
    if msg.starts_with("Initiating in-memory merge with ") {
        return Some(Token::Restart { kind: StateKind::ReduceMergeCopy, key: merge_key(own), detail: task(own) });
    }
    // A reduce that never merged in memory leaves the thread's start open until here.
    if let Some(rest) = msg.strip_prefix("Task:")
        && let Some((attempt, rest)) = find_attempt(rest)
        && attempt == own
        && rest.starts_with(" is done.")
    {
        return Some(Token::Forget { key: merge_key(own) });
    }
    None
}

/// The hosts a YARN reduce's fetcher threads were last given (`Assigning <host>:<port> with N to
/// fetcher#k`, by the shuffle scheduler, in the fetcher's own thread): each of its next fetches
/// is of a map that ran there.
#[derive(Default)]
pub struct FetcherHosts(Vec<(String, String)>);

impl FetcherHosts {
    /// Notes the host a line assigns to a fetcher; fills in the map's host of a fetch it starts.
    pub fn observe(&mut self, msg: &str, token: Option<&mut Token>) {
        if let Some(rest) = msg.strip_prefix("Assigning ")
            && let Some((address, rest)) = rest.split_once(" with ")
            && let Some((_, fetcher)) = split_at_first(rest, " to ")
        {
            let host = host_of_address(address).to_string();
            match self.0.iter_mut().find(|(name, _)| name == fetcher) {
                Some((_, known)) => *known = host,
                None => self.0.push((fetcher.to_string(), host)),
            }
            return;
        }
        if let Some(Token::Start { kind: StateKind::ReduceCopy, detail, .. }) = token
            && detail.peer_host.is_none()
            && let Some((fetcher, _)) = split_at_first(msg, " about to shuffle output of map ")
        {
            detail.peer_host = self.0.iter().find(|(name, _)| name == fetcher).map(|(_, host)| host.clone());
        }
    }
}

/// The reduce a YARN container's log is of, from its event fetcher's start
/// (`<reduce> Thread started: EventFetcher for fetching Map Completion Events`): the container's
/// folder does not name its attempt.
pub fn reduce_of_event_fetcher(msg: &str) -> Option<&str> {
    let (reduce, _) = split_at_first(msg, " Thread started: EventFetcher")?;
    let (attempt, rest) = find_attempt(reduce)?;
    (rest.is_empty() && !is_map_attempt(attempt)).then_some(attempt)
}

/// The in-memory merge of reduce `attempt`: one at a time per reduce.
fn merge_key(attempt: &str) -> String {
    ["merge", attempt].join(":")
}

/// The token `msg` gives; `own` is the attempt whose log it is, if it is one's.
pub fn recognize(msg: &str, own: Option<&str>) -> Option<Token> {
    if let Some(own) = own
        && let Some(token) = recognize_own(msg, own)
    {
        return Some(token);
    }
    // `LaunchTaskAction: <id>` (≤0.18) and `LaunchTaskAction (registerTask): <id> task's state:…`.
    if let Some(rest) = msg.strip_prefix("LaunchTaskAction") {
        let (attempt, _) = find_attempt(rest)?;
        return Some(Token::Start { kind: task_kind(attempt), key: task_key(attempt), detail: task(attempt) });
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
        let key = copy_key(attempt, map);
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
    // Up to 0.18 a merge thread per merge; from 0.19 one per reduce (see `Token::Restart`).
    if rest.starts_with(" Thread started: Thread for merging in memory files") {
        return Some(Token::Start { kind: StateKind::ReduceMergeCopy, key: merge_key(attempt), detail: task(attempt) });
    }
    // 0.18 `Merge of the 3 files in InMemoryFileSystem complete. Local file is …`; 0.20 `Merge
    // of the 3 files in-memory complete. Local file is …`.
    if rest.starts_with(" Merge of the ")
        && (contains(rest, " files in InMemoryFileSystem complete") || contains(rest, " files in-memory complete"))
    {
        return Some(Token::End {
            kind: StateKind::ReduceMergeCopy,
            key: merge_key(attempt),
            outcome: Outcome::Succeeded,
            detail: task(attempt),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yarn_fetch_opens_a_copy_and_its_event_fetcher_names_the_reduce() {
        let (reduce, map) = ("attempt_1553147085057_0001_r_000000_0", "attempt_1553147085057_0001_m_000002_0");
        for prefix in ["fetcher#2", "localfetcher#1"] {
            let line = format!("{prefix} about to shuffle output of map {map} decomp: 5000000 len: 5000004 to DISK");
            let expected = Token::Start {
                kind: StateKind::ReduceCopy,
                key: format!("copy:{reduce}:{map}"),
                detail: Detail {
                    task_id: Some(reduce.into()),
                    peer_task_id: Some(map.into()),
                    bytes: Some(5_000_004),
                    ..Detail::default()
                },
            };
            assert_eq!(recognize(&line, Some(reduce)), Some(expected), "{line}");
        }
        let failed = Token::End {
            kind: StateKind::ReduceCopy,
            key: format!("copy:{reduce}:{map}"),
            outcome: Outcome::Failed,
            detail: Detail {
                task_id: Some(reduce.into()),
                peer_task_id: Some(map.into()),
                peer_host: Some("worker3".into()),
                ..Detail::default()
            },
        };
        assert_eq!(recognize(&format!("Failed to shuffle output of {map} from worker3"), Some(reduce)), Some(failed));
        assert_eq!(recognize(&format!("Failed to shuffle output of {map} from worker3"), None), None);
        assert_eq!(recognize("Failed to shuffle output of null from worker3", Some(reduce)), None);
        let started = format!("{reduce} Thread started: EventFetcher for fetching Map Completion Events");
        assert_eq!(reduce_of_event_fetcher(&started), Some(reduce));
        assert_eq!(reduce_of_event_fetcher(&started.replace("_r_", "_m_")), None);
        assert_eq!(reduce_of_event_fetcher("Thread started: EventFetcher"), None);
    }

    #[test]
    fn a_fetchs_map_host_is_the_one_last_assigned_to_its_fetcher() {
        let (reduce, map) = ("attempt_1553147085057_0001_r_000000_0", "attempt_1553147085057_0001_m_000002_0");
        let mut hosts = FetcherHosts::default();
        let fetch = |hosts: &mut FetcherHosts, fetcher: &str| {
            let line = format!("{fetcher} about to shuffle output of map {map} decomp: 2 len: 6 to MEMORY");
            let mut token = recognize(&line, Some(reduce));
            hosts.observe(&line, token.as_mut());
            match token {
                Some(Token::Start { detail, .. }) => detail.peer_host,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(fetch(&mut hosts, "fetcher#1"), None);
        hosts.observe("Assigning worker1:13562 with 1 to fetcher#1", None);
        hosts.observe("Assigning worker3:13562 with 2 to fetcher#2", None);
        assert_eq!(fetch(&mut hosts, "fetcher#1").as_deref(), Some("worker1"));
        hosts.observe("Assigning worker4:13562 with 1 to fetcher#1", None);
        assert_eq!(fetch(&mut hosts, "fetcher#1").as_deref(), Some("worker4"));
        assert_eq!(fetch(&mut hosts, "fetcher#2").as_deref(), Some("worker3"));
    }

    const R: &str = "attempt_200808231712_0001_r_000002_0";
    const M: &str = "attempt_200808231712_0001_m_000001_0";

    #[test]
    fn task_starts_and_ends() {
        assert!(matches!(
            recognize("LaunchTaskAction: task_0001_m_000003_0", None),
            Some(Token::Start { kind: StateKind::Map, .. })
        ));
        let start = recognize(&format!("LaunchTaskAction (registerTask): {R} task's state:UNASSIGNED"), None).unwrap();
        assert_eq!(start, Token::Start { kind: StateKind::Reduce, key: format!("task:{R}"), detail: task(R) });
        assert_eq!(recognize(&format!("Task {M} is done."), None), Some(task_end(M, Outcome::Succeeded)));
        assert_eq!(
            recognize(&format!("Received KillTaskAction for task: {M}"), None),
            Some(task_end(M, Outcome::Killed))
        );
        assert_eq!(
            recognize(&format!("{M}: Task {M} failed to report status for 600 seconds. Killing!"), None),
            Some(task_end(M, Outcome::Failed))
        );
        assert_eq!(recognize(&format!("{M} Child Error"), None), Some(task_end(M, Outcome::Failed)));
        assert_eq!(recognize(&format!("{M} 0.6666667% hdfs://x/part-0:0+67108864"), None), None);
    }

    #[test]
    fn copies_and_merges() {
        let Some(Token::Start { kind, key, detail }) =
            recognize(&format!("{R} Copying {M} output from fp30.pdl.cmu.local."), None)
        else {
            panic!("no start")
        };
        assert_eq!((kind, key.as_str()), (StateKind::ReduceCopy, format!("copy:{R}:{M}").as_str()));
        assert_eq!(detail.peer_host.as_deref(), Some("fp30.pdl.cmu.local"));
        assert_eq!(detail.peer_task_id.as_deref(), Some(M));
        assert!(matches!(
            recognize(&format!("{R} done copying {M} output from fp30.pdl.cmu.local."), None),
            Some(Token::End { kind: StateKind::ReduceCopy, outcome: Outcome::Succeeded, .. })
        ));
        assert!(matches!(
            recognize(&format!("{R} Thread started: Thread for merging in memory files"), None),
            Some(Token::Start { kind: StateKind::ReduceMergeCopy, .. })
        ));
        for end in [
            format!("{R} Merge of the 3 files in InMemoryFileSystem complete. Local file is /tmp/map_0.out"),
            format!("{R} Merge of the 3 files in-memory complete. Local file is /tmp/x of size 10"),
        ] {
            assert!(matches!(recognize(&end, None), Some(Token::End { kind: StateKind::ReduceMergeCopy, .. })));
        }
    }

    /// 0.20's fetch of one map output into memory, as `ReduceTask` logs it, in order.
    #[test]
    fn copies_named_by_the_map_alone_belong_to_the_attempt_whose_log_it_is() {
        let own = Some(R);
        assert_eq!(recognize(&format!("header: {M}, compressed len: 567, decompressed len: 1234"), own), None);
        let start = recognize(&format!("Shuffling 1234 bytes (567 raw bytes) into RAM from {M}"), own);
        let Some(Token::Start { kind: StateKind::ReduceCopy, key, detail }) = start else { panic!("{start:?}") };
        assert_eq!(key, format!("copy:{R}:{M}"));
        assert_eq!(
            (detail.task_id.as_deref(), detail.peer_task_id.as_deref(), detail.bytes),
            (Some(R), Some(M), Some(567))
        );
        let end = recognize(&format!("Read 1234 bytes from map-output for {M}"), own);
        assert!(
            matches!(end, Some(Token::End { kind: StateKind::ReduceCopy, outcome: Outcome::Succeeded, ref key, .. }) if *key == format!("copy:{R}:{M}"))
        );
        let Some(Token::Amend { key, detail }) = recognize(&format!("Rec #1 from {M} -> (12, 40) from r01n07"), own)
        else {
            panic!("no amendment")
        };
        assert_eq!((key, detail.peer_host.as_deref()), (format!("copy:{R}:{M}"), Some("r01n07")));
        // The reduce's failure names it and the map's host itself, and ends the same copy.
        let failed = recognize(&format!("{R} copy failed: {M} from r01n07"), own);
        assert!(
            matches!(failed, Some(Token::End { outcome: Outcome::Failed, ref key, .. }) if *key == format!("copy:{R}:{M}"))
        );
        // Outside an attempt's log nothing says whose copy it is.
        assert_eq!(recognize(&format!("Read 1234 bytes from map-output for {M}"), None), None);
    }

    /// The merges of one reduce as 0.20's `ReduceTask` logs them (its attempt log): the thread
    /// starts once, each merge opens with a line that names no attempt. Each merge lasts from
    /// its `Initiating` line to its `complete` line: 5 s and then 8 s, by the times below.
    #[test]
    fn each_0_20_in_memory_merge_lasts_from_its_initiating_line_to_its_end() {
        use super::super::states::{Machine, Mark};
        let lines = [
            (0, format!("{R} Thread started: Thread for merging in memory files")),
            (10_000, "Initiating in-memory merge with 10 segments...".to_string()),
            (15_000, format!("{R} Merge of the 10 files in-memory complete. Local file is /x/map_1.out of size 9")),
            (20_000, "Initiating in-memory merge with 12 segments...".to_string()),
            (28_000, format!("{R} Merge of the 12 files in-memory complete. Local file is /x/map_7.out of size 9")),
        ];
        let (mut machine, mut out) = (Machine::default(), Vec::new());
        for (line, (ts_ms, msg)) in lines.iter().enumerate() {
            let token = recognize(msg, Some(R)).unwrap_or_else(|| panic!("no token for {msg}"));
            machine.observe(
                token,
                Mark { file: 0, ts_ms: *ts_ms, line: line as u64 + 1, offset: 0, host: None },
                &mut out,
            );
        }
        machine.finish(&mut out);
        let merges: Vec<_> = out
            .iter()
            .map(|s| (s.kind, s.start.as_ref().map(|m| m.line), s.end.as_ref().map(|m| m.line), s.duration_ms))
            .collect();
        assert_eq!(
            merges,
            [
                (StateKind::ReduceMergeCopy, Some(2), Some(3), Some(5000.0)),
                (StateKind::ReduceMergeCopy, Some(4), Some(5), Some(8000.0))
            ]
        );
        // A reduce with too few map outputs to merge in memory: its thread's start is no state.
        let (mut machine, mut out) = (Machine::default(), Vec::new());
        for (line, msg) in [
            format!("{R} Thread started: Thread for merging in memory files"),
            format!("Task:{R} is done. And is in the process of commiting"),
        ]
        .iter()
        .enumerate()
        {
            let token = recognize(msg, Some(R)).unwrap_or_else(|| panic!("no token for {msg}"));
            machine.observe(token, Mark { file: 0, ts_ms: 0, line: line as u64 + 1, offset: 0, host: None }, &mut out);
        }
        assert_eq!(machine.open_starts(), 0);
        machine.finish(&mut out);
        assert_eq!(out, []);
    }
}
