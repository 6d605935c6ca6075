//! The store's one way to Redis, whichever shape the Redis has: a single server (or a proxy
//! in front of a cluster), or a Redis Cluster whose redirections the client follows.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, ConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};

/// Where the store's Redis is.
pub(super) enum Target {
    Server(Client),
    /// The cluster's seed nodes: any of them tells the client where every slot lives.
    Cluster(Vec<ConnectionInfo>),
    /// The cluster's `rediss://` seed nodes, and what TLS trusts and shows on every node.
    #[cfg(feature = "redis-tls")]
    ClusterTls(Vec<ConnectionInfo>, redis::TlsCertificates),
}

/// How many times the cluster client follows a redirection or waits out a slot in migration
/// (`TRYAGAIN`) before the call fails; the store's timeout bounds it as a whole.
const CLUSTER_RETRIES: u32 = 4;

/// The connection, made on first use (it needs the runtime) and kept; both kinds reconnect
/// by themselves after a failure.
pub(super) struct Lazy {
    target: Target,
    made: Mutex<Option<Connection>>,
}

impl Lazy {
    pub(super) fn new(target: Target) -> Self {
        Self {
            target,
            made: Mutex::new(None),
        }
    }

    pub(super) fn is_made(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        self.made.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection, made now if it was not, with `timeout` for connecting and for answers.
    pub(super) async fn get(&self, timeout: Duration) -> RedisResult<Connection> {
        if let Some(made) = &*self.lock() {
            return Ok(made.clone());
        }
        #[cfg(feature = "redis-tls")]
        super::tls::ensure_crypto_provider();
        // At least a moment, so that a short timeout for answers still lets a connection be made.
        let patience = timeout.max(Duration::from_millis(250));
        let made = match &self.target {
            Target::Server(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(patience))
                    .set_response_timeout(Some(patience))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(200));
                let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
                Connection::Server(manager)
            }
            // The cluster client asks a seed for the slot map before it can route anything.
            Target::Cluster(seeds) => {
                let client = cluster(seeds, patience).build()?;
                Connection::Cluster(client.get_async_connection().await?)
            }
            #[cfg(feature = "redis-tls")]
            Target::ClusterTls(seeds, certificates) => {
                let client = cluster(seeds, patience)
                    .certs(certificates.clone())
                    .build()?;
                Connection::Cluster(client.get_async_connection().await?)
            }
        };
        // Two calls may have made one each; the first kept is the one every call uses.
        Ok(self.lock().get_or_insert(made).clone())
    }
}

/// A cluster client found through `seeds`, with `patience` for connecting and for answers.
fn cluster(seeds: &[ConnectionInfo], patience: Duration) -> ClusterClientBuilder {
    ClusterClient::builder(seeds.to_vec())
        .connection_timeout(patience)
        .response_timeout(patience)
        .retries(CLUSTER_RETRIES)
}

/// A connection to a single Redis server or to a Redis Cluster.
#[derive(Clone)]
pub(super) enum Connection {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Server(manager) => manager.req_packed_command(cmd),
            Connection::Cluster(cluster) => cluster.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Server(manager) => manager.req_packed_commands(cmd, offset, count),
            Connection::Cluster(cluster) => cluster.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(manager) => manager.get_db(),
            Connection::Cluster(cluster) => cluster.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `redis` crate may ask a connection which database it is on: the store's connection
    /// answers as the one it wraps does, the database its URL names (made without connecting).
    #[tokio::test]
    async fn a_connection_tells_the_database_its_url_names() {
        let client = Client::open("redis://127.0.0.1:1/5").expect("a Redis URL");
        let manager =
            ConnectionManager::new_lazy_with_config(client, ConnectionManagerConfig::new())
                .expect("a lazy connection");
        assert_eq!(Connection::Server(manager).get_db(), 5);
    }
}
