//! Events to SALSA states (SALSA §5): the daemons' recognisers ([`super::tasktracker`],
//! [`super::datanode`], [`super::clienttrace`]) turn a message into a [`Token`]; a [`Machine`]
//! per (host, daemon) stream pairs starts with ends. Pairing is first-in first-out per key, so
//! the earliest open start of an activity takes the first end that names it. A start never
//! ended is kept with a NULL end, an end never started with a NULL start.
//!
//! DataNode logs at DEBUG carry no activity on starts, only `Number of active connections is:
//! N`; every rise of N is a thread start, and each end that has no start of its own takes the
//! earliest of them (SALSA §5.2, "FIFO completion").

use std::collections::VecDeque;

/// The states of SALSA Tables 1–2, plus `MapCopy` (the map side of a shuffle, which 0.20's
/// clienttrace makes visible) and `XceiverThread` (a DEBUG connection start no end claimed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    Map,
    Reduce,
    ReduceCopy,
    ReduceMergeCopy,
    MapCopy,
    WriteBlock,
    WriteBlockReplicated,
    ReadBlock,
    XceiverThread,
    /// A YARN container fetching its job's files to the node, then running.
    ContainerLocalizing,
    ContainerRunning,
}

impl StateKind {
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Map => "Map",
            StateKind::Reduce => "Reduce",
            StateKind::ReduceCopy => "ReduceCopy",
            StateKind::ReduceMergeCopy => "ReduceMergeCopy",
            StateKind::MapCopy => "MapCopy",
            StateKind::WriteBlock => "WriteBlock",
            StateKind::WriteBlockReplicated => "WriteBlock_Replicated",
            StateKind::ReadBlock => "ReadBlock",
            StateKind::XceiverThread => "XceiverThread",
            StateKind::ContainerLocalizing => "ContainerLocalizing",
            StateKind::ContainerRunning => "ContainerRunning",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Killed,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "SUCCEEDED",
            Outcome::Failed => "FAILED",
            Outcome::Killed => "KILLED",
        }
    }
}

/// What the state's rows say besides times: filled from the start, completed by the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detail {
    pub task_id: Option<String>,
    pub peer_task_id: Option<String>,
    pub block_id: Option<String>,
    pub peer_host: Option<String>,
    pub mirror_host: Option<String>,
    pub bytes: Option<i64>,
}

impl Detail {
    /// Fields the end knows and the start did not.
    fn complete_with(&mut self, end: Detail) {
        let Detail { task_id, peer_task_id, block_id, peer_host, mirror_host, bytes } = end;
        self.task_id = self.task_id.take().or(task_id);
        self.peer_task_id = self.peer_task_id.take().or(peer_task_id);
        self.block_id = self.block_id.take().or(block_id);
        self.peer_host = self.peer_host.take().or(peer_host);
        self.mirror_host = self.mirror_host.take().or(mirror_host);
        self.bytes = self.bytes.or(bytes);
    }
}

/// A message's meaning for the state machine.
#[derive(Debug, PartialEq)]
pub enum Token {
    /// An activity starts; `key` names it so that its end finds it.
    Start { kind: StateKind, key: String, detail: Detail },
    /// An activity's own start where an earlier line opened it early: replaces the newest open
    /// start of `key`, else starts it. From 0.19 a reduce's merge thread logs `Thread started`
    /// once and `Initiating in-memory merge` at each merge, which the merge's end closes.
    Restart { kind: StateKind, key: String, detail: Detail },
    /// An activity that cannot be running any more, whose open starts are dropped without a
    /// state: a 0.19–1.x reduce starts its merge thread whether it merges or not, and every
    /// merge has ended by `Task:<attempt> is done`.
    Forget { key: String },
    /// An activity ends; the end's kind wins (a write turns out to be replicated only at its end).
    End { kind: StateKind, key: String, outcome: Outcome, detail: Detail },
    /// An activity the line names only in part fails: a DataNode's failed receive names its
    /// block, not its writer (`writeBlock blk_… received exception …`). Ends the one open start
    /// whose key begins with `prefix`; where several do (a merged file, in which each DataNode
    /// of the pipeline received the block), the line cannot say whose it is and ends none.
    Fail { prefix: String },
    /// A whole state in one line (clienttrace): it ended now and lasted `duration_ms`. Where
    /// the daemon also logged the start (0.20 DataNodes log `Receiving block` and then, instead
    /// of `Received block`, the clienttrace line), `closes` names that start, which this line
    /// completes.
    Complete { kind: StateKind, duration_ms: Option<f64>, detail: Detail, closes: Option<String> },
    /// DEBUG `Number of active connections is: N`.
    Connections(u32),
    /// A line after an activity's end that tells more about it (0.20's `Rec #1 … from <host>`
    /// names the source of a copy just ended): completes the held end of `key`.
    Amend { key: String, detail: Detail },
}

/// Where and when a token was seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// Index of the file in its stream.
    pub file: usize,
    pub ts_ms: i64,
    pub line: u64,
    /// Byte offset of the line: a table that already holds bytes before it skips the row.
    pub offset: u64,
    /// The host the line names as its own in a merged file; None elsewhere, where the
    /// stream's host is every state's.
    pub host: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub kind: StateKind,
    pub host: Option<String>,
    pub start: Option<Mark>,
    pub end: Option<Mark>,
    pub duration_ms: Option<f64>,
    pub outcome: Option<Outcome>,
    pub detail: Detail,
    pub from_clienttrace: bool,
    /// Where the start line a clienttrace line closed was seen (its own start is the end less
    /// the duration): the row an earlier run wrote unterminated for that line is this one.
    pub closed: Option<Mark>,
}

impl State {
    /// The line that completed the state, or its start when it never ended: the row belongs
    /// to that line's file, and a table that already holds that line's bytes skips it.
    pub fn last_mark(&self) -> Option<&Mark> {
        self.end.as_ref().or(self.start.as_ref())
    }
}

struct Open {
    kind: StateKind,
    mark: Mark,
    detail: Detail,
}

/// Copies ended without their source host that wait for the line naming it: a reduce's copier
/// threads (5 by default, `mapred.reduce.parallel.copies`) interleave, so the line that follows
/// one copy's end comes within a few of its peers' lines.
const HELD_ENDS: usize = 64;

/// Pairs the tokens of one stream (the files of one host and daemon, in time order).
#[derive(Default)]
pub struct Machine {
    open: foldhash::HashMap<String, VecDeque<Open>>,
    open_count: usize,
    connections: u32,
    connection_starts: VecDeque<Mark>,
    /// Ended states a later [`Token::Amend`] may complete, oldest first, with their keys.
    held: VecDeque<(String, State)>,
    /// Lines an earlier run read are fed again to reopen its open starts: connection counts
    /// there are ignored, so that the new lines count threads as a run starting there does
    /// (the earlier run's connection starts are not reopened).
    pub replaying: bool,
}

impl Machine {
    /// Feeds one token; a finished state is pushed to `out`.
    pub fn observe(&mut self, token: Token, mark: Mark, out: &mut Vec<State>) {
        match token {
            Token::Start { kind, key, detail } => {
                self.open.entry(key).or_default().push_back(Open { kind, mark, detail });
                self.open_count += 1;
            }
            Token::Restart { kind, key, detail } => match self.open.get_mut(&key).and_then(VecDeque::back_mut) {
                Some(open) => *open = Open { kind, mark, detail },
                None => self.observe(Token::Start { kind, key, detail }, mark, out),
            },
            Token::Forget { key } => while self.take_open(&key).is_some() {},
            Token::End { kind, key, outcome, detail } => {
                let thread_start = self.take_connection_start(kind);
                let (start, mut full) = match self.take_open(&key) {
                    Some(open) => (Some(open.mark), open.detail),
                    None => (thread_start, Detail::default()),
                };
                full.complete_with(detail);
                let duration_ms = start.as_ref().map(|s| (mark.ts_ms - s.ts_ms) as f64);
                let host = start.as_ref().and_then(|s| s.host.clone()).or_else(|| mark.host.clone());
                let awaits_source = kind == StateKind::ReduceCopy && full.peer_host.is_none();
                let state = State {
                    kind,
                    host,
                    start,
                    end: Some(mark),
                    duration_ms,
                    outcome: Some(outcome),
                    detail: full,
                    from_clienttrace: false,
                    closed: None,
                };
                if awaits_source {
                    self.held.push_back((key, state));
                    if self.held.len() > HELD_ENDS {
                        out.extend(self.held.pop_front().map(|(_, state)| state));
                    }
                } else {
                    out.push(state);
                }
            }
            Token::Fail { prefix } => {
                let mut keys = self.open.iter().filter(|(key, _)| key.starts_with(&prefix));
                if let (Some((key, opens)), None) = (keys.next(), keys.next())
                    && let Some(kind) = opens.front().map(|open| open.kind)
                {
                    let key = key.clone();
                    let end = Token::End { kind, key, outcome: Outcome::Failed, detail: Detail::default() };
                    self.observe(end, mark, out);
                }
            }
            Token::Amend { key, detail } => {
                if let Some(at) = self.held.iter().position(|(held, _)| *held == key)
                    && let Some((_, mut state)) = self.held.remove(at)
                {
                    state.detail.complete_with(detail);
                    out.push(state);
                }
            }
            Token::Complete { kind, duration_ms, detail, closes } => {
                // The clienttrace duration is the daemon's own measure: it wins over the start
                // line's time, which only stops the start from being left unterminated.
                let closed = closes.and_then(|key| self.take_open(&key)).map(|open| open.mark);
                let start = duration_ms.map(|d| Mark { ts_ms: mark.ts_ms - d.round() as i64, ..mark.clone() });
                out.push(State {
                    kind,
                    host: mark.host.clone(),
                    start,
                    end: Some(mark),
                    duration_ms,
                    outcome: Some(Outcome::Succeeded),
                    detail,
                    from_clienttrace: true,
                    closed,
                });
            }
            Token::Connections(_) if self.replaying => {}
            Token::Connections(n) => {
                for _ in self.connections..n {
                    self.connection_starts.push_back(mark.clone());
                }
                self.connections = n;
            }
        }
    }

    /// The earliest open start of `key`, taken out.
    fn take_open(&mut self, key: &str) -> Option<Open> {
        let queue = self.open.get_mut(key)?;
        let open = queue.pop_front();
        if queue.is_empty() {
            self.open.remove(key);
        }
        self.open_count -= usize::from(open.is_some());
        open
    }

    /// Each DataNode thread raised the connection count once; its end consumes that start.
    fn take_connection_start(&mut self, kind: StateKind) -> Option<Mark> {
        let datanode = matches!(kind, StateKind::ReadBlock | StateKind::WriteBlock | StateKind::WriteBlockReplicated);
        if datanode { self.connection_starts.pop_front() } else { None }
    }

    /// Starts still open; kept for the next file of the stream.
    pub fn open_starts(&self) -> usize {
        self.open_count + self.connection_starts.len()
    }

    /// Where each open start of a named activity was seen (DEBUG connection starts aside).
    pub fn keyed_open_marks(&self) -> impl Iterator<Item = &Mark> {
        self.open.values().flatten().map(|open| &open.mark)
    }

    /// The stream has ended: held ends are let go as they are, and every open start becomes an
    /// unterminated state.
    pub fn finish(mut self, out: &mut Vec<State>) {
        out.extend(self.held.drain(..).map(|(_, state)| state));
        let mut open: Vec<Open> = self.open.drain().flat_map(|(_, q)| q).collect();
        open.extend(self.connection_starts.drain(..).map(|mark| Open {
            kind: StateKind::XceiverThread,
            mark,
            detail: Detail::default(),
        }));
        open.sort_by_key(|o| (o.mark.offset, o.mark.line));
        out.extend(open.into_iter().map(|o| State {
            kind: o.kind,
            host: o.mark.host.clone(),
            start: Some(o.mark),
            end: None,
            duration_ms: None,
            outcome: None,
            detail: o.detail,
            from_clienttrace: false,
            closed: None,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(ts_ms: i64, line: u64) -> Mark {
        Mark { file: 0, ts_ms, line, offset: line * 100, host: None }
    }

    fn start(key: &str) -> Token {
        Token::Start { kind: StateKind::Map, key: key.into(), detail: Detail::default() }
    }

    fn end(kind: StateKind, key: &str) -> Token {
        Token::End { kind, key: key.into(), outcome: Outcome::Succeeded, detail: Detail::default() }
    }

    #[test]
    fn pairs_first_in_first_out_and_keeps_the_unpaired() {
        let mut m = Machine::default();
        let mut out = Vec::new();
        m.observe(start("a"), mark(1000, 1), &mut out);
        m.observe(start("a"), mark(1500, 2), &mut out);
        m.observe(end(StateKind::Map, "a"), mark(4000, 3), &mut out);
        m.observe(end(StateKind::Map, "b"), mark(5000, 4), &mut out);
        assert_eq!(m.open_starts(), 1);
        m.finish(&mut out);
        let summary: Vec<_> = out
            .iter()
            .map(|s| (s.start.as_ref().map(|m| m.line), s.end.as_ref().map(|m| m.line), s.duration_ms))
            .collect();
        assert_eq!(summary, vec![(Some(1), Some(3), Some(3000.0)), (None, Some(4), None), (Some(2), None, None)]);
    }

    #[test]
    fn a_complete_line_closes_the_start_it_names() {
        let mut m = Machine::default();
        let mut out = Vec::new();
        let write = || Token::Start {
            kind: StateKind::WriteBlock,
            key: "write:blk_1:10.0.0.1".into(),
            detail: Detail::default(),
        };
        m.observe(write(), mark(1000, 1), &mut out);
        let complete = |closes: Option<&str>| Token::Complete {
            kind: StateKind::WriteBlock,
            duration_ms: Some(400.5),
            detail: Detail::default(),
            closes: closes.map(String::from),
        };
        m.observe(complete(Some("write:blk_1:10.0.0.1")), mark(1500, 2), &mut out);
        assert_eq!(m.open_starts(), 0);
        m.observe(write(), mark(2000, 3), &mut out);
        m.observe(complete(Some("write:blk_9:10.0.0.1")), mark(2500, 4), &mut out);
        assert_eq!(m.open_starts(), 1, "a line closes only the start it names");
        let first = &out[0];
        // The start is the end less the duration, to the millisecond (400.5 rounds to 401).
        assert_eq!((first.duration_ms, first.start.as_ref().map(|s| s.ts_ms)), (Some(400.5), Some(1099)));
    }

    #[test]
    fn a_failed_receive_ends_the_one_write_of_its_block() {
        let mut m = Machine::default();
        let mut out = Vec::new();
        let write =
            |key: &str| Token::Start { kind: StateKind::WriteBlock, key: key.into(), detail: Detail::default() };
        let fail = |block: &str| Token::Fail { prefix: format!("write:{block}:") };
        m.observe(write("write:blk_1:10.0.0.1"), mark(1000, 1), &mut out);
        m.observe(write("write:blk_12:10.0.0.1"), mark(1100, 2), &mut out);
        m.observe(fail("blk_1"), mark(1600, 3), &mut out);
        // A merged file: two DataNodes of a pipeline received blk_12; the line says not whose.
        m.observe(write("write:blk_12:10.0.0.2"), mark(1200, 4), &mut out);
        m.observe(fail("blk_12"), mark(1700, 5), &mut out);
        m.observe(fail("blk_7"), mark(1800, 6), &mut out);
        let got: Vec<_> = out.iter().map(|s| (s.kind, s.outcome, s.duration_ms)).collect();
        assert_eq!(got, vec![(StateKind::WriteBlock, Some(Outcome::Failed), Some(600.0))]);
        assert_eq!(m.open_starts(), 2);
    }

    #[test]
    fn debug_connection_counts_give_reads_their_starts() {
        let mut m = Machine::default();
        let mut out = Vec::new();
        m.observe(Token::Connections(1), mark(1000, 1), &mut out);
        m.observe(Token::Connections(2), mark(1200, 2), &mut out);
        m.observe(end(StateKind::ReadBlock, "read:blk_1"), mark(1700, 3), &mut out);
        m.observe(Token::Connections(1), mark(1701, 4), &mut out);
        m.observe(Token::Connections(2), mark(1800, 5), &mut out);
        m.observe(end(StateKind::ReadBlock, "read:blk_2"), mark(2000, 6), &mut out);
        m.finish(&mut out);
        let got: Vec<_> = out.iter().map(|s| (s.kind, s.start.as_ref().map(|m| m.ts_ms), s.duration_ms)).collect();
        assert_eq!(
            got,
            vec![
                (StateKind::ReadBlock, Some(1000), Some(700.0)),
                (StateKind::ReadBlock, Some(1200), Some(800.0)),
                (StateKind::XceiverThread, Some(1800), None),
            ]
        );
    }

    /// 0.20 names a copy's source host only on the line after its end; five copier threads
    /// interleave their lines.
    #[test]
    fn a_copy_end_waits_for_the_line_that_names_its_source() {
        let mut m = Machine::default();
        let mut out = Vec::new();
        let copy = |map: &str| Token::Start { kind: StateKind::ReduceCopy, key: map.into(), detail: Detail::default() };
        let read = |map: &str| Token::End {
            kind: StateKind::ReduceCopy,
            key: map.into(),
            outcome: Outcome::Succeeded,
            detail: Detail::default(),
        };
        let source = |map: &str, host: &str| Token::Amend {
            key: map.into(),
            detail: Detail { peer_host: Some(host.into()), ..Detail::default() },
        };
        m.observe(copy("m1"), mark(1000, 1), &mut out);
        m.observe(copy("m2"), mark(1100, 2), &mut out);
        m.observe(read("m1"), mark(1500, 3), &mut out);
        m.observe(read("m2"), mark(1600, 4), &mut out);
        assert!(out.is_empty(), "both ends wait for their source");
        m.observe(source("m2", "r01n02"), mark(1600, 5), &mut out);
        m.observe(source("m1", "r01n01"), mark(1601, 6), &mut out);
        m.observe(source("m9", "r01n09"), mark(1602, 7), &mut out);
        // A disk copy of 1.x logs no source: its end is let go with the stream.
        m.observe(copy("m3"), mark(2000, 8), &mut out);
        m.observe(read("m3"), mark(2500, 9), &mut out);
        m.finish(&mut out);
        let got: Vec<_> = out
            .iter()
            .map(|s| (s.start.as_ref().map(|m| m.line), s.detail.peer_host.as_deref(), s.duration_ms))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(2), Some("r01n02"), Some(500.0)),
                (Some(1), Some("r01n01"), Some(500.0)),
                (Some(8), None, Some(500.0))
            ]
        );
        // More ends than are held: the oldest is let go unamended.
        let mut m = Machine::default();
        let mut out = Vec::new();
        for i in 0..=HELD_ENDS as u64 {
            m.observe(read(&format!("m{i}")), mark(1000, i), &mut out);
        }
        assert_eq!(out.iter().map(|s| s.end.as_ref().map(|m| m.line)).collect::<Vec<_>>(), vec![Some(0)]);
    }
}
