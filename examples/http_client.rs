//! Calling `shoal serve` from Rust over HTTP: list the datasets, read one's
//! schema, search one vector (coalesced with other clients' searches) and
//! a batch. Start the server first (`cargo run --release -- serve`), then
//! `cargo run --example http_client [URL]` (default http://127.0.0.1:8080;
//! set SHOAL_API_KEY when the server has an api_key).

use serde_json::{json, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let key = std::env::var("SHOAL_API_KEY").ok();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let call = |method: &str,
                path: &str,
                body: Option<Value>|
     -> Result<Value, Box<dyn std::error::Error>> {
        let full = format!("{url}{path}");
        let auth = key.as_ref().map(|k| format!("Bearer {k}"));
        let mut response = match body {
            Some(body) => {
                let mut request = agent.post(&full).header("content-type", "application/json");
                if let Some(auth) = &auth {
                    request = request.header("authorization", auth);
                }
                request.send(body.to_string())?
            }
            None => {
                let mut request = agent.get(&full);
                if let Some(auth) = &auth {
                    request = request.header("authorization", auth);
                }
                request.call()?
            }
        };
        let status = response.status().as_u16();
        let value: Value = serde_json::from_str(&response.body_mut().read_to_string()?)?;
        if status != 200 {
            return Err(format!("{method} {path}: {status} {}", value["error"]).into());
        }
        Ok(value)
    };

    let datasets = call("GET", "/v1/datasets", None)?;
    let name = datasets["datasets"][0]
        .as_str()
        .ok_or("the server has no dataset")?
        .to_string();
    let info = call("GET", &format!("/v1/datasets/{name}"), None)?;
    println!(
        "dataset {name}: version {}, {} rows",
        info["version"], info["rows"]
    );
    // The vector column's dimension: {"name": ..., "type": "vector", "dim": 128, "metric": "l2"}.
    let dim: usize = info["columns"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "vector")
        .and_then(|c| c["dim"].as_u64())
        .ok_or("no vector column")? as usize;

    let vector: Vec<f32> = (0..dim).map(|i| (i % 7) as f32 * 0.1).collect();
    let one = call(
        "POST",
        &format!("/v1/datasets/{name}/search"),
        Some(json!({ "vector": vector, "k": 5 })),
    )?;
    println!(
        "search: {} hits, batch of {} ({}), {} µs",
        one["hits"].as_array().map_or(0, Vec::len),
        one["batch"]["size"],
        one["batch"]["mode"],
        one["took_us"]
    );
    for hit in one["hits"].as_array().into_iter().flatten() {
        println!("  id {} at distance {}", hit["id"], hit["distance"]);
    }
    let many = call(
        "POST",
        &format!("/v1/datasets/{name}/search/batch"),
        Some(json!({ "vectors": [vector.clone(), vector], "ks": [3, 1] })),
    )?;
    println!(
        "batch: {} result lists",
        many["results"].as_array().map_or(0, Vec::len)
    );
    Ok(())
}
