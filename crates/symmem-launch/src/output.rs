//! Reading the ranks' pipes: one thread per pipe splits lines and sends them
//! to the launching thread, which hands them to the sink in arrival order.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::mpsc::SyncSender;
use std::thread::{self, JoinHandle};

use crate::report::{OutputLine, Stream};

/// Longest line delivered in one piece; longer ones (or binary output without
/// newlines) are cut into pieces of this size instead of growing a buffer
/// without bound.
const MAX_LINE: u64 = 1 << 20;

/// Reader threads only copy bytes; a small stack lets 2 × 256 of them be cheap.
const READER_STACK: usize = 64 * 1024;

/// Starts a thread that forwards every line of `pipe` as an [`OutputLine`].
/// It ends at EOF (all writers closed the pipe) or when the receiver is gone.
/// While the channel is full it waits, and so in turn does the rank once its
/// pipe is full: a slow sink slows the ranks down instead of growing memory.
pub(crate) fn spawn_reader<R: Read + Send + 'static>(
    rank: usize,
    stream: Stream,
    pipe: R,
    tx: SyncSender<OutputLine>,
) -> io::Result<JoinHandle<()>> {
    let name = match stream {
        Stream::Stdout => format!("rank{rank}-stdout"),
        Stream::Stderr => format!("rank{rank}-stderr"),
    };
    thread::Builder::new()
        .name(name)
        .stack_size(READER_STACK)
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {
                        if buf.last() == Some(&b'\n') {
                            buf.pop();
                            if buf.last() == Some(&b'\r') {
                                buf.pop();
                            }
                        }
                        let text = String::from_utf8_lossy(&buf).into_owned();
                        let line = OutputLine {
                            rank: Some(rank),
                            stream,
                            text,
                        };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                    // A read error on a pipe means it is unusable: stop reading.
                    Err(_) => break,
                }
            }
        })
}

/// The default sink: prints `[rank 3] text` (a cluster launcher's own lines as they are) to
/// the launcher's stdout or stderr, matching the rank's stream. Write errors (e.g. a closed
/// pipe after `| head`) are ignored so that the run can still be stopped cleanly.
pub fn print_line(line: &OutputLine) {
    let _ = match line.stream {
        Stream::Stdout => writeln!(io::stdout().lock(), "{line}"),
        Stream::Stderr => writeln!(io::stderr().lock(), "{line}"),
    };
}

impl std::fmt::Display for OutputLine {
    /// `[rank 3] text`, or a launcher's own line as it is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.rank {
            Some(rank) => write!(f, "[rank {rank}] {}", self.text),
            None => f.write_str(&self.text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn splits_lines_keeps_the_unterminated_tail_and_is_lossy() {
        let (tx, rx) = mpsc::sync_channel(16);
        let input: &[u8] = b"one\r\ntwo\n\xffbad\nlast";
        spawn_reader(1, Stream::Stderr, input, tx)
            .expect("thread")
            .join()
            .expect("join");
        let lines: Vec<OutputLine> = rx.iter().collect();
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "\u{fffd}bad", "last"]);
        assert!(
            lines
                .iter()
                .all(|l| l.rank == Some(1) && l.stream == Stream::Stderr)
        );
    }
}
