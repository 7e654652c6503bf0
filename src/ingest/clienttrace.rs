//! Hadoop 0.20+ clienttrace lines (`…DataNode.clienttrace`, `…TaskTracker.clienttrace`): one
//! line per finished transfer with both ends, bytes and a duration in nanoseconds (`duration:`,
//! `duration(ns):` from 2.x).
//! `HDFS_READ` is a ReadBlock served to `dest`, `HDFS_WRITE` a WriteBlock from `src`, and
//! `MAPRED_SHUFFLE` the map side of a copy (`MapCopy`): map output served to a reduce at `dest`.
//! An `HDFS_WRITE` line replaces 0.20's `Received block`: it completes the `Receiving block`
//! start of the same block and writer.

use super::datanode::write_key;
use super::ids::{field_after, find_attempt, find_block, host_of_address};
use super::states::{Detail, StateKind, Token};

/// The attempt a client id names: `attempt_…` (a shuffle's map), `DFSClient_attempt_…` (0.20),
/// `DFSClient_attempt_…_<random>_<thread>` (2.x on); None for other clients.
fn client_attempt(client: &str) -> Option<&str> {
    let id = client.strip_prefix("DFSClient_").unwrap_or(client);
    // An attempt id is six fields: `attempt`, tracker, job, kind, task, try.
    let end = id.match_indices('_').nth(5).map_or(id.len(), |(at, _)| at);
    find_attempt(&id[..end]).filter(|(_, rest)| rest.is_empty()).map(|(attempt, _)| attempt)
}

pub fn recognize(msg: &str) -> Option<Token> {
    if !msg.starts_with("src: ") {
        return None;
    }
    let op = field_after(msg, "op:")?;
    let src = host_of_address(field_after(msg, "src:")?).to_string();
    let dest = host_of_address(field_after(msg, "dest:")?).to_string();
    let bytes = field_after(msg, "bytes:").and_then(|b| b.parse().ok());
    let client_task = field_after(msg, "cliID:").and_then(client_attempt).map(str::to_string);
    // `duration(ns):` from 2.x on.
    let duration = field_after(msg, "duration:").or_else(|| field_after(msg, "duration(ns):"));
    let duration_ms = duration.and_then(|d| d.parse::<f64>().ok()).map(|ns| ns / 1e6);
    let block_id = find_block(msg).map(str::to_string);
    let mut closes = None;
    let (kind, detail) = match op {
        "HDFS_READ" => (
            StateKind::ReadBlock,
            Detail { task_id: client_task, block_id, peer_host: Some(dest), bytes, ..Detail::default() },
        ),
        "HDFS_WRITE" => {
            closes = Some(write_key(block_id.as_deref(), &src));
            (
                StateKind::WriteBlock,
                Detail { task_id: client_task, block_id, peer_host: Some(src), bytes, ..Detail::default() },
            )
        }
        "MAPRED_SHUFFLE" => {
            let reduce = field_after(msg, "reduceID:").and_then(find_attempt).map(|(a, _)| a.to_string());
            (
                StateKind::MapCopy,
                Detail {
                    task_id: client_task,
                    peer_task_id: reduce,
                    peer_host: Some(dest),
                    bytes,
                    ..Detail::default()
                },
            )
        }
        _ => return None,
    };
    Some(Token::Complete { kind, duration_ms, detail, closes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_operations() {
        let read = "src: /127.0.0.1:50012, dest: /127.0.0.1:53107, bytes: 10620380, op: HDFS_READ, cliID: DFSClient_attempt_200909120624_0005_m_000000_0, srvID: DS-199263106-127.0.1.1-50012-1242830204189, blockid: blk_-4693506771893277444_1763, duration: 0";
        let Some(Token::Complete { kind, duration_ms, detail, .. }) = recognize(read) else { panic!() };
        assert_eq!((kind, duration_ms), (StateKind::ReadBlock, Some(0.0)));
        assert_eq!(detail.block_id.as_deref(), Some("blk_-4693506771893277444"));
        assert_eq!(detail.task_id.as_deref(), Some("attempt_200909120624_0005_m_000000_0"));
        assert_eq!((detail.peer_host.as_deref(), detail.bytes), (Some("127.0.0.1"), Some(10620380)));
        let shuffle = "src: 127.0.1.1:50062, dest: 127.0.1.1:36461, bytes: 1368349, op: MAPRED_SHUFFLE, cliID: attempt_200909120624_0005_m_000000_0, reduceID: attempt_200909120624_0005_r_000000_0, duration: 277277094";
        let Some(Token::Complete { kind, duration_ms, detail, .. }) = recognize(shuffle) else { panic!() };
        assert_eq!((kind, duration_ms), (StateKind::MapCopy, Some(277.277094)));
        assert_eq!(detail.peer_task_id.as_deref(), Some("attempt_200909120624_0005_r_000000_0"));
        let write = "src: /127.0.0.1:40121, dest: /127.0.0.1:50012, bytes: 13353733, op: HDFS_WRITE, cliID: DFSClient_attempt_200909120624_0005_r_000000_0, srvID: DS-1, blockid: blk_4332711451661776648_1778, duration: 1099062112";
        assert!(matches!(recognize(write), Some(Token::Complete { kind: StateKind::WriteBlock, .. })));
        // 3.x: a `volume`, an `offset`, the block pool's id, `duration(ns)`.
        let write = "src: /10.0.0.2:45678, dest: /10.0.0.3:9866, volume: /data/1, bytes: 134217728, op: HDFS_WRITE, cliID: DFSClient_attempt_1553147085057_0001_m_000000_0_1_1, offset: 0, srvID: 7c1e, blockid: BP-1457921563-10.0.0.1-1553147000000:blk_1073741825_1001, duration(ns): 1500000000";
        let Some(Token::Complete { kind, duration_ms, detail, closes }) = recognize(write) else { panic!() };
        assert_eq!((kind, duration_ms, detail.bytes), (StateKind::WriteBlock, Some(1500.0), Some(134217728)));
        assert_eq!(closes.as_deref(), Some("write:blk_1073741825:10.0.0.2"));
        assert_eq!(detail.task_id.as_deref(), Some("attempt_1553147085057_0001_m_000000_0"));
        assert_eq!(recognize("src: x, op: HDFS_DELETE"), None);
        assert_eq!(recognize("Served block blk_1 to /x"), None);
    }
}
