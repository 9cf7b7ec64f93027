//! `ops` in the app config: where the ops HTTP endpoint listens. Off unless
//! `listen` is set; a bare port (`"9100"`) binds to 127.0.0.1 only, so
//! exposing metrics beyond the host is an explicit `"0.0.0.0:9100"`.

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpsConfig {
    /// `"9100"` (= `127.0.0.1:9100`) or `"ip:port"`; absent = no endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

impl OpsConfig {
    /// The address to bind, if the endpoint is on.
    pub fn addr(&self) -> Result<Option<SocketAddr>, FieldError> {
        let Some(listen) = &self.listen else {
            return Ok(None);
        };
        let listen = listen.trim();
        if let Ok(port) = listen.trim_start_matches(':').parse::<u16>() {
            return Ok(Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port))));
        }
        listen.parse::<SocketAddr>().map(Some).map_err(|_| {
            FieldError::new(
                "listen",
                format!("`{listen}` is not a port or an ip:port (e.g. \"9100\" or \"0.0.0.0:9100\")"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen(s: &str) -> OpsConfig {
        OpsConfig { listen: Some(s.into()) }
    }

    #[test]
    fn a_bare_port_binds_to_localhost_and_an_address_is_taken_as_given() {
        assert_eq!(listen("9100").addr().unwrap(), Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(
            listen("0.0.0.0:9100").addr().unwrap(),
            Some("0.0.0.0:9100".parse().unwrap())
        );
        assert_eq!(OpsConfig::default().addr().unwrap(), None);
        assert!(listen("localhost:x").addr().is_err());
    }
}
