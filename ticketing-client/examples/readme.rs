use std::time::Duration;
use ticketing_client::{Error, TicketBroker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // TICKETING_ADDR: one address, or every node of a cluster separated by commas
    let addrs = std::env::var("TICKETING_ADDR").unwrap_or_else(|_| "127.0.0.1:5225".into());
    let broker = TicketBroker::builder(addrs.split(',')).connect().await?;
    let s = Duration::from_secs; // wait 5 s in the queue, lease 30 s, need 2 s of work time
    match broker.acquire("seat-17", s(5), s(30), s(2)).await {
        Ok(Some(ticket)) => {
            // in ONE database transaction: the fence with ticket.token(), then the write
            println!("holding seat-17 with token {}", ticket.token());
            ticket.release().await?;
        }
        Ok(None) => println!("not granted within 5 s"),
        Err(Error::Indeterminate) => println!("maybe granted: do NOT enter, try again later"),
        Err(e) => return Err(e.into()),
    }
    broker.close().await;
    Ok(())
}
