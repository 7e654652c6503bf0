//! DataNode messages that start and end SALSA's WriteBlock, WriteBlock_Replicated and ReadBlock
//! states (SALSA Table 2, Hadoop 0.16–1.x wording; 2.x–3.x write `Receiving <pool>:<block> …`
//! and `Received <pool>:<block> …` without the word `block`), and the DataNode's own address in
//! a line, which is how merged multi-host files (Loghub's HDFS) tell whose line it is.

use super::ids::{field_after, find_block, host_of_address, split_at_first, split_at_last};
use super::states::{Detail, Outcome, StateKind, Token};

fn block_detail(msg: &str) -> Detail {
    Detail { block_id: find_block(msg).map(str::to_string), ..Detail::default() }
}

/// A write is known by its block and its writer: the three DataNodes of a pipeline each log
/// the same block, and a merged file holds all three.
pub fn write_key(block: Option<&str>, writer: &str) -> String {
    ["write", block.unwrap_or(""), writer].join(":")
}

fn size_after(msg: &str) -> Option<i64> {
    field_after(msg, "of size ")?.parse().ok()
}

/// What follows `Receiving` or `Received` (`verb`) and the block: `block blk_…` up to 1.x,
/// `BP-…:blk_…` (a block pool's) from 2.x.
fn after_block_verb<'a>(msg: &'a str, verb: &str) -> Option<&'a str> {
    let rest = msg.strip_prefix(verb)?.strip_prefix(' ')?;
    rest.strip_prefix("block ").or_else(|| rest.starts_with("BP-").then_some(rest))
}

pub fn recognize(msg: &str) -> Option<Token> {
    // Loghub and 0.18 prefix some messages with the DataNode's name: `10.0.0.1:50010 Served…`.
    let body = strip_own_address(msg);
    if let Some(rest) = after_block_verb(body, "Receiving") {
        let writer = host_of_address(field_after(rest, "src:")?).to_string();
        let mut detail = block_detail(rest);
        let key = write_key(detail.block_id.as_deref(), &writer);
        detail.peer_host = Some(writer);
        return Some(Token::Start { kind: StateKind::WriteBlock, key, detail });
    }
    if let Some(rest) = after_block_verb(body, "Received") {
        let mut detail = block_detail(rest);
        // `… src: /a:p dest: /b:p of size N` (a block from another DataNode), `… of size N from
        // /a` (0.18 PacketResponder), `… from /a and mirrored to /m:p` (≤0.17).
        let writer = match field_after(rest, "src:") {
            Some(src) => src,
            None => split_at_last(rest, " from ")?.1.split(' ').next()?,
        };
        let writer = host_of_address(writer).to_string();
        let mut kind = StateKind::WriteBlock;
        if let Some((_, mirror)) = split_at_first(rest, " and mirrored to ") {
            kind = StateKind::WriteBlockReplicated;
            detail.mirror_host = Some(host_of_address(mirror.trim()).to_string());
        }
        detail.bytes = size_after(rest);
        let key = write_key(detail.block_id.as_deref(), &writer);
        detail.peer_host = Some(writer);
        return Some(Token::End { kind, key, outcome: Outcome::Succeeded, detail });
    }
    // A receive that failed (its writer died, or the pipeline broke): 0.18–1.x `writeBlock blk_…
    // received exception …`, 2.x–3.x `opWriteBlock BP-…:blk_… received exception …`.
    if let Some(rest) = body.strip_prefix("writeBlock ").or_else(|| body.strip_prefix("opWriteBlock "))
        && let Some((block, _)) = split_at_first(rest, " received exception ")
    {
        return find_block(block).map(|block| Token::Fail { prefix: write_key(Some(block), "") });
    }
    let served = body.strip_prefix("Served block ").map(|rest| (rest, Outcome::Succeeded));
    let failed = body.strip_prefix("Got exception while serving ").map(|rest| (rest, Outcome::Failed));
    if let Some((rest, outcome)) = served.or(failed) {
        let mut detail = block_detail(rest);
        let reader = host_of_address(split_at_last(rest, " to ")?.1.trim()).to_string();
        let key = ["read", detail.block_id.as_deref().unwrap_or(""), &reader].join(":");
        detail.peer_host = Some(reader);
        return Some(Token::End { kind: StateKind::ReadBlock, key, outcome, detail });
    }
    if let Some(count) = body.strip_prefix("Number of active connections is: ") {
        return count.trim().parse().ok().map(Token::Connections);
    }
    None
}

/// `10.251.194.213:50010 Served …` or `10.251.30.85:50010:Got exception …` → the message after
/// the DataNode's own address.
fn strip_own_address(msg: &str) -> &str {
    match leading_address(msg) {
        Some(len) => msg[len..].trim_start_matches([':', ' ']),
        None => msg,
    }
}

/// Length of an `ip:port` at the start of a message.
fn leading_address(msg: &str) -> Option<usize> {
    let b = msg.as_bytes();
    let ip_len = b.iter().position(|c| !(c.is_ascii_digit() || *c == b'.'))?;
    if ip_len < 7 || b.get(ip_len) != Some(&b':') {
        return None;
    }
    let port_len = b[ip_len + 1..].iter().position(|c| !c.is_ascii_digit()).unwrap_or(b.len() - ip_len - 1);
    (port_len > 0).then_some(ip_len + 1 + port_len)
}

/// The DataNode that wrote a line, by the address the line gives it: the address leading the
/// message, the `dest:` of a block it receives, or its end of a transfer clienttrace records
/// (the source of a read it served, the destination of a write). None for lines that do not
/// say (PacketResponder, NameNode). Names the writer of each line of a merged file, and each
/// DataNode's own addresses (the `addresses` table).
pub fn own_host(msg: &str) -> Option<&str> {
    if let Some(len) = leading_address(msg) {
        return Some(host_of_address(&msg[..len]));
    }
    if after_block_verb(msg, "Receiving").or_else(|| after_block_verb(msg, "Received")).is_some() {
        return field_after(msg, "dest:").map(host_of_address);
    }
    if msg.starts_with("src: ") {
        let own_end = match field_after(msg, "op:")? {
            "HDFS_READ" => "src:",
            "HDFS_WRITE" => "dest:",
            _ => return None,
        };
        return field_after(msg, own_end).map(host_of_address);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pair_on_block_and_writer() {
        let start =
            recognize("Receiving block blk_-5623176793330377570 src: /10.251.75.228:53725 dest: /10.251.75.228:50010")
                .unwrap();
        let Token::Start { kind, key, detail } = start else { panic!() };
        assert_eq!(kind, StateKind::WriteBlock);
        assert_eq!(key, "write:blk_-5623176793330377570:10.251.75.228");
        assert_eq!(detail.peer_host.as_deref(), Some("10.251.75.228"));
        let end = recognize("Received block blk_-5623176793330377570 of size 67108864 from /10.251.75.228").unwrap();
        let Token::End { kind, key: end_key, detail, .. } = end else { panic!() };
        assert_eq!((kind, end_key), (StateKind::WriteBlock, key));
        assert_eq!(detail.bytes, Some(67108864));
        let from_datanode =
            recognize("Received block blk_1 src: /10.0.0.2:4000 dest: /10.0.0.3:50010 of size 42").unwrap();
        assert!(
            matches!(from_datanode, Token::End { ref key, detail: Detail { bytes: Some(42), .. }, .. } if key == "write:blk_1:10.0.0.2")
        );
        let replicated = recognize(
            "Received block blk_8410448073201003521 from /172.19.145.131 and mirrored to /172.19.145.139:50010",
        )
        .unwrap();
        let Token::End { kind, detail, .. } = replicated else { panic!() };
        assert_eq!(kind, StateKind::WriteBlockReplicated);
        assert_eq!(
            (detail.peer_host.as_deref(), detail.mirror_host.as_deref()),
            (Some("172.19.145.131"), Some("172.19.145.139"))
        );
        // 2.x–3.x (`DataXceiver.writeBlock`): the block pool's id before the block, no `block`.
        let block = "BP-1457921563-10.0.0.1-1553147000000:blk_1073741825_1001";
        let Some(Token::Start { key, .. }) =
            recognize(&format!("Receiving {block} src: /10.0.0.2:45678 dest: /10.0.0.3:9866"))
        else {
            panic!("a 2.x start")
        };
        assert_eq!(key, "write:blk_1073741825:10.0.0.2");
        let end = recognize(&format!("Received {block} src: /10.0.0.2:45678 dest: /10.0.0.3:9866 of size 134217728"));
        assert!(
            matches!(end, Some(Token::End { key: ref k, detail: Detail { bytes: Some(134217728), .. }, .. }) if *k == key)
        );
        assert_eq!(recognize("Receiving empty packet for block blk_1"), None);
    }

    #[test]
    fn a_failed_receive_names_its_block_not_its_writer() {
        let fail = |prefix: &str| Some(Token::Fail { prefix: prefix.into() });
        let old = "writeBlock blk_-5623176793330377570 received exception java.io.EOFException: while trying to read 65557 bytes";
        assert_eq!(recognize(old), fail("write:blk_-5623176793330377570:"));
        let new = "opWriteBlock BP-1457921563-10.0.0.1-1553147000000:blk_1073741825_1001 received exception java.io.IOException: Premature EOF from inputStream";
        assert_eq!(recognize(new), fail("write:blk_1073741825:"));
        assert_eq!(recognize("writeBlock received exception java.io.EOFException"), None);
        assert_eq!(recognize("writeBlock blk_1 done"), None);
    }

    #[test]
    fn reads_and_own_addresses() {
        let msg = "10.251.194.213:50010 Served block blk_-7724713468912166542 to /10.251.203.80";
        let Token::End { kind, outcome, detail, .. } = recognize(msg).unwrap() else { panic!() };
        assert_eq!((kind, outcome), (StateKind::ReadBlock, Outcome::Succeeded));
        assert_eq!(detail.peer_host.as_deref(), Some("10.251.203.80"));
        assert_eq!(own_host(msg), Some("10.251.194.213"));
        let failed = "10.251.30.85:50010:Got exception while serving blk_-2918118818249673980 to /10.251.90.64:";
        assert!(matches!(recognize(failed), Some(Token::End { outcome: Outcome::Failed, .. })));
        assert_eq!(own_host(failed), Some("10.251.30.85"));
        assert_eq!(own_host("Receiving block blk_1 src: /10.0.0.1:3 dest: /10.0.0.9:50010"), Some("10.0.0.9"));
        assert_eq!(own_host("PacketResponder 1 for block blk_1 terminating"), None);
        assert_eq!(
            own_host("Receiving BP-9-10.0.0.1-1:blk_1073741825_1001 src: /10.0.0.2:4 dest: /10.0.0.7:9866"),
            Some("10.0.0.7")
        );
        assert_eq!(own_host("Receiving empty packet"), None);
        let served = "src: /10.0.0.4:50010, dest: /10.0.0.7:40112, bytes: 9, op: HDFS_READ, cliID: DFSClient_1";
        assert_eq!(own_host(served), Some("10.0.0.4"));
        let written = "src: /10.0.0.7:40113, dest: /10.0.0.4:50010, bytes: 9, op: HDFS_WRITE, cliID: DFSClient_1";
        assert_eq!(own_host(written), Some("10.0.0.4"));
        assert_eq!(own_host("src: 10.0.0.4:50060, dest: 10.0.0.7:1, bytes: 9, op: MAPRED_SHUFFLE"), None);
        assert_eq!(recognize("Number of active connections is: 3"), Some(Token::Connections(3)));
        assert_eq!(recognize("Deleting block blk_1 file /x"), None);
    }
}
