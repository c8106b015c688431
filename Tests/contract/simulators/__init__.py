"""The servers the contract suites talk to in place of real providers (Python standard library only):
the provider simulators (sim_salesforce, sim_tableau, sim_marketsharp, sim_duke), an OAuth server with
refresh-token rotation (rotating_server), and the HTTP plumbing they share (sim_http). Each checks
what the plugin sends against the provider's documented model; no test lives here."""
