//! A TCP receiver that reuses node-local buffers from a pool.
//!
//! `cargo run -p placer-bufpool --example pool -- [NODE]` starts a loopback sender and
//! receives 256 MiB into pooled buffers on NODE (default 0), then prints the pool's
//! statistics and where the buffer's pages are.

use placer_bufpool::numa::page_nodes;
use placer_bufpool::{BufPool, Placement, PoolConfig};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node: u32 = std::env::args().nth(1).map_or(Ok(0), |s| s.parse())?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let total: usize = 256 << 20;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut s = TcpStream::connect(addr)?;
        let chunk = vec![0x5au8; 64 << 10];
        let mut sent = 0;
        while sent < total {
            s.write_all(&chunk)?;
            sent += chunk.len();
        }
        Ok(())
    });
    let (mut sock, _) = listener.accept()?;
    let mut pool = BufPool::new(PoolConfig::new(64 << 10, Placement::Bind(node)))?;
    let mut got = 0usize;
    loop {
        let mut buf = pool.get()?;
        let n = sock.read(buf.as_mut_slice())?;
        pool.put(buf);
        if n == 0 {
            break;
        }
        got += n;
    }
    sender.join().expect("sender thread")?;
    let b = pool.get()?;
    let nodes = page_nodes(&b.page_addrs())?;
    println!("received {got} bytes; {:?}", pool.stats());
    println!("buffer pages on nodes: {nodes:?}");
    Ok(())
}
