/* Duke University mobile authorizer — scaffold: describes itself; every
 * hook is the host's standard step until the provider is implemented. */
#include <authbridge/plugin.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct ab_plugin {
    const ab_host_api *host;
};

static ab_status duke_init(const ab_host_api *host, ab_plugin **plugin, const char **error)
{
    json_object_seed(0);
    ab_plugin *state = malloc(sizeof *state);
    if (state == NULL) {
        *error = "duke: out of memory";
        return AB_ERROR;
    }
    state->host = host;
    *plugin = state;
    return AB_OK;
}

static void duke_shutdown(ab_plugin *plugin) { free(plugin); }

static ab_status duke_describe(ab_plugin *plugin, ab_call *call, ab_json input)
{
    (void)input;
    static const char text[] =
        "{\"id\":\"duke\",\"version\":\"0.1.0\",\"displayName\":\"Duke\","
        "\"description\":\"Duke University mobile authorizer\",\"flows\":[\"external\"],\"capabilities\":[]}";
    plugin->host->set_result(call, (ab_json){ text, strlen(text) });
    return AB_OK;
}

static const ab_plugin_vtable duke_vtable = {
    .size = sizeof(ab_plugin_vtable),
    .init = duke_init,
    .shutdown = duke_shutdown,
    .describe = duke_describe,
};

AB_DEFINE_PLUGIN("duke", "0.1.0", &duke_vtable)
