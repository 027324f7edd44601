//! What a hub and its streams say to each other: the frames of a hub's WebSocket, and
//! the body of a notification (`POST /notify`). A change is `<seq>\n<doc>`, a piece of
//! text `+<n> <offset> <attempt_id>\n<text>`, and the end of a new stream's catch-up
//! [`CAUGHT_UP`].

use onceclick_protocol::live::{Piece, Position, FRAME_CHARS};

/// One change as the hub sends it to a stream: `<seq>\n<doc>`.
pub(crate) fn frame(seq: u64, doc: &str) -> String {
    format!("{seq}\n{doc}")
}

/// A piece of an attempt's text as the hub sends it to a stream:
/// `+<n> <offset> <attempt_id>\n<text>`.
pub(crate) fn text_frame(piece: &Piece<'_>) -> String {
    format!(
        "+{} {} {}\n{}",
        piece.n, piece.offset, piece.attempt_id, piece.text
    )
}

/// The frames of a piece, each within a WebSocket message's limit
/// ([`FRAME_CHARS`] code points).
pub(crate) fn text_frames(piece: &Piece<'_>) -> Vec<String> {
    piece.parts(FRAME_CHARS).map(|p| text_frame(&p)).collect()
}

/// The frame that ends a new stream's catch-up: what follows is live.
pub(crate) const CAUGHT_UP: &str = "=";

/// What a hub sent a stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A change: its counter and the document.
    Doc(u64, &'a str),
    /// A piece of an attempt's text.
    Text(Piece<'a>),
    /// The catch-up is over ([`CAUGHT_UP`]).
    CaughtUp,
}

/// A frame's content, if it is one.
pub(crate) fn unframe(text: &str) -> Option<Frame<'_>> {
    if text == CAUGHT_UP {
        return Some(Frame::CaughtUp);
    }
    let (head, body) = text.split_once('\n')?;
    let Some(head) = head.strip_prefix('+') else {
        return Some(Frame::Doc(Position::parse(head)?.0, body));
    };
    let mut parts = head.splitn(3, ' ');
    let mut number = || Some(Position::parse(parts.next()?)?.0);
    let (n, offset) = (u32::try_from(number()?).ok()?, number()?);
    Some(Frame::Text(Piece {
        n,
        offset,
        attempt_id: parts.next().filter(|id| !id.is_empty())?,
        text: body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_and_anything_else_is_refused() {
        let text = frame(7, "{\"id\":\"job_1\"}");
        assert_eq!(unframe(&text), Some(Frame::Doc(7, "{\"id\":\"job_1\"}")));
        let piece = Piece {
            n: 2,
            offset: 40,
            attempt_id: "att_1",
            text: "a\nb 😀",
        };
        assert_eq!(unframe(&text_frame(&piece)), Some(Frame::Text(piece)));
        assert_eq!(unframe(CAUGHT_UP), Some(Frame::CaughtUp));
        for bad in [
            "7",
            "x\n{}",
            "-1\n{}",
            "+2 40\nab",
            "+2 40 \nab",
            "+x 40 att\nab",
            "+2\nab",
            "==",
        ] {
            assert_eq!(unframe(bad), None, "{bad:?}");
        }
    }
}
