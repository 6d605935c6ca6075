//! The Redis store over TLS and as an ACL user, as a managed Redis asks: a real `redis-server`
//! serving TLS only, with certificates made by the test from a throwaway CA, and ACL users
//! holding just the rights the store documents. Real time: the store talks to Redis over a
//! socket.

use std::time::Duration;

use paceline::{Gate, RateLimited, RedisStore, RedisTls, StoreError};
use tokio::time::{Instant, sleep};

use crate::support::redis_server::{self, RedisCluster, RedisServer};
use crate::support::tls::{self, Pki, authority};

const MS: Duration = Duration::from_millis(1);

/// The rights RedisStore's docs list for its ACL user, one by one.
const RIGHTS: [&str; 14] = tls::RIGHTS;

#[derive(Debug, Clone)]
struct Throttled(Duration);

fn gate_on(store: RedisStore) -> Gate<Throttled> {
    Gate::builder(|e: &Throttled| Some(RateLimited::new().retry_after(e.0)))
        .max_retries(0)
        .store(store)
        .build()
        .unwrap()
}

/// The test's own connection to a TLS server, to look at what the stores wrote.
async fn connect(redis: &RedisServer, pki: &Pki) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::build_with_tls(
        redis.tls_url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pki.ca_pem.clone().into_bytes()),
        },
    )
    .unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Throttles one call through `gate` for `after`, waits until the backoff is in Redis, and
/// returns an instant no later than the throttle.
async fn throttle_once(
    gate: &Gate<Throttled>,
    admin: &mut redis::aio::MultiplexedConnection,
    after: Duration,
) -> Instant {
    let throttled_at = Instant::now();
    let result = gate
        .call(|| async move { Err::<(), _>(Throttled(after)) })
        .await;
    assert!(result.unwrap_err().is_gave_up());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            // The gates' backoffs, not those of a check.
            .arg("paceline:{*}:backoff*")
            .query_async(admin)
            .await
            .unwrap();
        if !keys.is_empty() {
            return throttled_at;
        }
        assert!(Instant::now() < deadline, "the backoff never reached Redis");
        sleep(MS).await;
    }
}

/// Two gates on one namespace over TLS: B waits out the backoff that A's throttle began.
async fn assert_backoff_shared(
    a: &Gate<Throttled>,
    b: &Gate<Throttled>,
    redis: &RedisServer,
    pki: &Pki,
) {
    let mut admin = connect(redis, pki).await;
    let throttled_at = throttle_once(a, &mut admin, 300 * MS).await;
    let b_start = b
        .call(|| async { Ok::<_, Throttled>(Instant::now()) })
        .await
        .unwrap();
    assert!(
        b_start >= throttled_at + 300 * MS,
        "B started {:?} after A's throttle",
        b_start - throttled_at
    );
    assert_eq!(
        b.stats().held_by_fleet,
        1,
        "B heard of the backoff from Redis"
    );
    assert_eq!(a.stats().store_unanswered + b.stats().store_unanswered, 0);
}

#[tokio::test]
async fn the_scripts_run_over_tls_with_a_private_ca_and_gates_share_a_backoff() {
    let pki = Pki::new();
    let redis = RedisServer::start_tls(&pki.server(false, None), &[]);
    let store = || async {
        let store = RedisStore::open_tls(&redis.tls_url(), "ads:token-1", &pki.tls()).unwrap();
        // Connected before the first call, whose 50 ms could not hold a handshake on a busy
        // machine.
        store.check().await.unwrap();
        store
    };
    let (a, b) = (gate_on(store().await), gate_on(store().await));
    assert_backoff_shared(&a, &b, &redis, &pki).await;
}

#[tokio::test]
async fn a_redis_that_speaks_only_tls_1_2_is_reached() {
    // Some managed Redis services offer nothing newer; rustls leaves TLS 1.2 out unless asked.
    let pki = Pki::new();
    let redis = RedisServer::start_tls(&pki.server(false, Some("TLSv1.2")), &[]);
    let store = RedisStore::open_tls(&redis.tls_url(), "ns", &pki.tls()).unwrap();
    store.check().await.unwrap();
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_ca_is_a_tls_error_at_once_and_gates_go_on_without_redis() {
    let pki = Pki::new();
    let redis = RedisServer::start_tls(&pki.server(false, None), &[]);
    let (other_ca, _) = authority("someone else's CA");
    let stores = [
        // The system's roots do not hold the throwaway CA.
        RedisStore::open(&redis.tls_url(), "ns").unwrap(),
        RedisStore::open_tls(
            &redis.tls_url(),
            "ns",
            &RedisTls::new().root_cert(other_ca).unwrap(),
        )
        .unwrap(),
    ];
    for store in stores {
        let asked = Instant::now();
        let error = store.check().await.unwrap_err();
        // No hang: the check waits 2 s at most, and a refused certificate ends it sooner.
        assert!(
            asked.elapsed() < Duration::from_secs(3),
            "answered after {:?}",
            asked.elapsed()
        );
        let StoreError::Tls { reason } = &error else {
            panic!("not a TLS error: {error:?}");
        };
        assert!(reason.contains("UnknownIssuer"), "{reason}");
        assert!(
            error
                .to_string()
                .starts_with("the TLS handshake with Redis failed")
        );
        // A gate on such a store is not held: it decides alone, after one timeout at most.
        let gate = gate_on(store);
        let started = Instant::now();
        gate.call(|| async { Ok::<_, Throttled>(()) })
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(gate.stats().store_unanswered, 1);
    }
}

/// Where the child process of the next test finds its Redis.
const CHILD_URL: &str = "PACELINE_TEST_ROOTS_URL";
/// The test that child runs, by its name in this binary (the area `tests/redis`).
const CHILD: &str = "redis_tls::system_roots_child";

#[test]
fn a_plain_rediss_url_trusts_the_system_roots_or_with_webpki_roots_mozillas_alone() {
    let pki = Pki::new();
    let redis = RedisServer::start_tls(&pki.server(false, None), &[]);
    // The system's roots are read from the file SSL_CERT_FILE names, if set: a process of its
    // own gets the throwaway CA as its system's only root.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD, "--ignored", "--nocapture"])
        .env("SSL_CERT_FILE", pki.ca_file())
        .env(CHILD_URL, redis.tls_url())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(child.status.success(), "{out}");
    assert!(out.contains("1 passed"), "{out}");
}

#[tokio::test]
#[ignore = "run by the test above, in a process of its own with SSL_CERT_FILE set"]
async fn system_roots_child() {
    let url = std::env::var(CHILD_URL).expect("run by the test above");
    let checked = RedisStore::open(&url, "ns").unwrap().check().await;
    if cfg!(feature = "redis-tls-webpki-roots") {
        assert!(
            matches!(checked, Err(StoreError::Tls { .. })),
            "{checked:?}"
        );
    } else {
        checked.unwrap();
    }
}

#[tokio::test]
async fn a_redis_that_asks_for_a_client_certificate_takes_the_one_given() {
    let pki = Pki::new();
    let redis = RedisServer::start_tls(&pki.server(true, None), &[]);
    let with_cert = pki
        .tls()
        .client_cert(pki.client_cert_pem.clone(), pki.client_key_pem.clone())
        .unwrap();
    let store = RedisStore::open_tls(&redis.tls_url(), "ns", &with_cert).unwrap();
    store.check().await.unwrap();

    let without = RedisStore::open_tls(&redis.tls_url(), "ns", &pki.tls()).unwrap();
    let error = without.check().await.unwrap_err();
    assert!(
        matches!(error, StoreError::Tls { .. }),
        "not a TLS error: {error:?}"
    );
}

#[tokio::test]
async fn a_redis_without_scripts_fails_the_check_and_no_redis_is_unreachable() {
    let pki = Pki::new();
    // As a Redis-compatible service that runs no Lua would answer.
    let redis = RedisServer::start_tls(
        &pki.server(false, None),
        &["--rename-command", "EVALSHA", ""],
    );
    let store = RedisStore::open_tls(&redis.tls_url(), "ns", &pki.tls()).unwrap();
    match store.check().await {
        Err(StoreError::Failed { reason }) => {
            assert!(reason.contains("unknown command 'EVALSHA'"), "{reason}")
        }
        other => panic!("not failed: {other:?}"),
    }

    let nowhere = format!("rediss://127.0.0.1:{}", redis_server::free_port());
    let store = RedisStore::open_tls(&nowhere, "ns", &pki.tls()).unwrap();
    let asked = Instant::now();
    let error = store.check().await;
    assert!(
        matches!(error, Err(StoreError::Unreachable { .. })),
        "{error:?}"
    );
    assert!(asked.elapsed() < Duration::from_secs(3));
}

#[test]
fn wrong_pem_texts_and_plain_urls_are_clear_errors() {
    let pki = Pki::new();
    let invalid = |result: Result<RedisTls, StoreError>| match result {
        Err(StoreError::InvalidCertificate { reason }) => reason,
        other => panic!("not an invalid certificate: {other:?}"),
    };
    let reason = invalid(RedisTls::new().root_cert("not a certificate"));
    assert!(reason.contains("no certificate"), "{reason}");
    // A key where the root certificate should be.
    invalid(RedisTls::new().root_cert(pki.client_key_pem.clone()));
    let reason = invalid(
        RedisTls::new().client_cert(pki.client_cert_pem.clone(), pki.client_cert_pem.clone()),
    );
    assert!(reason.contains("private key"), "{reason}");
    invalid(RedisTls::new().client_cert(pki.client_key_pem.clone(), pki.client_key_pem.clone()));
    // Neither PEM text shows in logs.
    let tls = pki
        .tls()
        .client_cert(pki.client_cert_pem.clone(), pki.client_key_pem.clone())
        .unwrap();
    assert!(!format!("{tls:?}").contains("BEGIN"), "{tls:?}");

    // TLS asked for, over a URL that would send everything in the clear.
    for tls in [RedisTls::new(), pki.tls()] {
        let error = RedisStore::open_tls("redis://127.0.0.1:6379", "ns", &tls).unwrap_err();
        assert!(matches!(error, StoreError::InvalidUrl { .. }), "{error:?}");
    }
}

/// `--user NAME on >secret KEYS RIGHTS…`, as redis-server takes it on its command line.
fn user<'a>(name: &'a str, keys: &'a str, rights: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--user", name, "on", ">secret", keys];
    args.extend(rights);
    args
}

#[tokio::test]
async fn an_acl_user_with_the_documented_rights_on_its_namespace_runs_a_gate_over_tls() {
    let pki = Pki::new();
    // The line `RedisStore`'s docs give, for the namespace `ads:token-1` (its `:` escaped).
    let redis = RedisServer::start_tls(
        &pki.server(false, None),
        &user("paceline", "~paceline:{ads%3Atoken-1}:*", &RIGHTS),
    );
    let url = format!("rediss://paceline:secret@127.0.0.1:{}", redis.port());
    let store = || async {
        let store = RedisStore::open_tls(&url, "ads:token-1", &pki.tls()).unwrap();
        store.check().await.unwrap();
        store
    };
    let (a, b) = (gate_on(store().await), gate_on(store().await));
    assert_backoff_shared(&a, &b, &redis, &pki).await;

    // An adaptive gate stores its rate in a hash (`HSET`, `HMGET`, `PEXPIRE`).
    let adaptive = Gate::builder(|e: &Throttled| Some(RateLimited::new().retry_after(e.0)))
        .rate(50.0)
        .adaptive(1.0, 100.0)
        .max_retries(0)
        .store(store().await)
        .build()
        .unwrap();
    let mut admin = connect(&redis, &pki).await;
    throttle_once(&adaptive, &mut admin, 300 * MS).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis::cmd("HGET")
        .arg("paceline:{ads%3Atoken-1}:rate")
        .arg("v")
        .query_async::<Option<u64>>(&mut admin)
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the cut rate never reached Redis"
        );
        sleep(MS).await;
    }
    assert_eq!(adaptive.stats().store_unanswered, 0);

    // The same user on another namespace reaches keys it may not touch.
    let elsewhere = RedisStore::open_tls(&url, "ads:token-2", &pki.tls()).unwrap();
    match elsewhere.check().await {
        Err(StoreError::Denied { reason }) => {
            assert!(reason.contains("no permissions to access"), "{reason}")
        }
        other => panic!("not denied: {other:?}"),
    }
}

#[tokio::test]
async fn a_user_short_of_any_one_documented_right_is_denied_by_the_check() {
    let pki = Pki::new();
    let mut args = Vec::new();
    let names: Vec<String> = (0..RIGHTS.len()).map(|i| format!("without-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let mut rights = RIGHTS.to_vec();
        rights.remove(i);
        args.extend(user(name, "~paceline:*", &rights));
    }
    args.extend(user("all", "~paceline:*", &RIGHTS));
    args.extend(user("no-keys", "resetkeys", &RIGHTS));
    // No one may come in without a user name and password.
    args.extend(["--user", "default", "off"]);
    let redis = RedisServer::start_tls(&pki.server(false, None), &args);
    let store = |name: &str| {
        let url = format!("rediss://{name}:secret@127.0.0.1:{}", redis.port());
        RedisStore::open_tls(&url, "ns", &pki.tls()).unwrap()
    };
    store("all").check().await.unwrap();
    for (name, right) in names.iter().zip(RIGHTS) {
        match store(name).check().await {
            // A command the store sends is named; one its scripts send is found by the
            // script's name and line.
            Err(StoreError::Denied { reason }) => match right {
                "+evalsha" | "+script|load" => {
                    let command = format!("'{}'", right.trim_start_matches('+'));
                    assert!(reason.contains(&command), "without {right}: {reason}");
                }
                _ => assert!(
                    reason.contains("can't run this command")
                        && reason.contains(".lua)")
                        && reason.contains("@user_script:"),
                    "without {right}: {reason}"
                ),
            },
            other => panic!("without {right}: not denied: {other:?}"),
        }
    }
    // A gate on such a store, unchecked, is not held and does not panic: it warns, and goes
    // on alone.
    let gate = gate_on(store(&names[0]));
    gate.call(|| async { Ok::<_, Throttled>(()) })
        .await
        .unwrap();
    assert_eq!(gate.stats().store_unanswered, 1);
    assert!(matches!(
        store("no-keys").check().await,
        Err(StoreError::Denied { .. })
    ));
    for url in [
        format!("rediss://all:wrong@127.0.0.1:{}", redis.port()),
        redis.tls_url(),
        // Another database than 0 needs `+select`.
        format!("rediss://all:secret@127.0.0.1:{}/1", redis.port()),
    ] {
        let store = RedisStore::open_tls(&url, "ns", &pki.tls()).unwrap();
        let error = store.check().await;
        assert!(
            matches!(error, Err(StoreError::Denied { .. })),
            "{url}: {error:?}"
        );
    }
}

#[tokio::test]
async fn a_tls_cluster_with_a_private_ca_runs_the_scripts_for_a_user_with_the_cluster_rights() {
    let pki = Pki::new();
    let mut args = user("all", "~paceline:*", &RIGHTS);
    args.extend(["+cluster|slots", "+asking"]);
    args.extend(user("no-slots", "~paceline:*", &RIGHTS));
    args.push("+asking");
    args.extend(user("no-asking", "~paceline:*", &RIGHTS));
    args.push("+cluster|slots");
    let cluster = RedisCluster::start_tls(&pki.server(false, None), &args);
    let store = |name: &str| {
        let seeds = cluster
            .tls_seeds()
            .into_iter()
            .map(|seed| seed.replace("rediss://", &format!("rediss://{name}:secret@")));
        RedisStore::open_cluster_tls(seeds, "ns", &pki.tls()).unwrap()
    };
    store("all").check().await.unwrap();
    match store("no-slots").check().await {
        Err(StoreError::Denied { reason }) => {
            assert!(reason.contains("'cluster|slots'"), "{reason}")
        }
        other => panic!("not denied: {other:?}"),
    }
    // The `redis` crate follows a slot while it moves with `ASKING`, which needs its right too.
    let asking = |name: &str| {
        cluster.cli(
            0,
            &[
                "--user",
                name,
                "--pass",
                "secret",
                "--no-auth-warning",
                "ASKING",
            ],
        )
    };
    assert_eq!(asking("all"), "OK");
    assert!(
        asking("no-asking").contains("NOPERM"),
        "{}",
        asking("no-asking")
    );

    // The system's roots do not hold the throwaway CA; plain seeds are refused.
    let untrusted = RedisStore::open_cluster(cluster.tls_seeds(), "ns").unwrap();
    let error = untrusted.check().await;
    assert!(matches!(error, Err(StoreError::Tls { .. })), "{error:?}");
    let plain = RedisStore::open_cluster_tls(cluster.seeds(), "ns", &pki.tls()).unwrap_err();
    assert!(matches!(plain, StoreError::InvalidUrl { .. }), "{plain:?}");
}
