//! A credentials Secret read by many reconciles at once: one read of the Secret serves them all,
//! when its client is first made and each time it is read again.

use super::*;

#[tokio::test]
async fn reconciles_asking_for_a_secret_s_client_together_read_it_once() {
    let rig = rig().await;
    let mut secret = Secret::default();
    secret.metadata.name = Some("team-a-metal".into());
    secret.metadata.namespace = Some(NS.into());
    secret.data = Some(
        [
            (
                "url".to_owned(),
                ByteString(rig.sim.url.clone().into_bytes()),
            ),
            ("hmac".to_owned(), ByteString(b"a key".to_vec())),
        ]
        .into(),
    );
    rig.api.put(&secret);
    let clients = rig.ctx.catalogs.clients().clone();
    let asks = (0..20).map(|_| clients.of(NS, Some("team-a-metal")));
    for client in futures::future::join_all(asks).await {
        client.expect("a client");
    }
    let path = format!("/api/v1/namespaces/{NS}/secrets/team-a-metal");
    assert_eq!(rig.api.reads_of(&path), 1, "reads of the Secret");
}
