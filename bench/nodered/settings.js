// Node-RED settings for the hubd bench: headless (no editor, no admin API), flows from bench/nodered/flows.json.
module.exports = {
    uiPort: parseInt(process.env.BENCH_NODE_RED_PORT || "1880", 10),
    uiHost: "127.0.0.1",
    flowFile: "flows.json",
    flowFilePretty: true,
    credentialSecret: false,
    disableEditor: true,
    httpAdminRoot: false,
    httpNodeRoot: false,
    httpStatic: false,
    logging: {console: {level: "info", metrics: false, audit: false}},
    contextStorage: {default: {module: "memory"}},
    functionExternalModules: false,
    externalModules: {autoInstall: false, palette: {allowInstall: false}, modules: {allowInstall: false}},
    editorTheme: {projects: {enabled: false}},
    telemetry: {enabled: false},
    diagnostics: {enabled: false},
};
