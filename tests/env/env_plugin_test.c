/* An NCCL environment plugin for braid's tests, written as a site's plugin
 * is, in C against NCCL's documented table (its types declared here, as a
 * plugin carries its own copy of NCCL's header).
 *
 * It serves the NAME=value lines of the file BRAID_TEST_ENV_FILE names
 * (read at init): a line's value is the variable's, "NAME=" hides NAME
 * (getEnv returns NULL whatever the environment holds), and every other
 * name is the environment's.  v2's init logs at INFO through NCCL's
 * logger; getEnv("BRAID_TEST_ENV_WARN") logs a warning.  finalize writes
 * "finalized" to the file BRAID_TEST_ENV_FINALIZED names, where set.
 *
 * Builds: the default exports ncclEnvPlugin_v2 and ncclEnvPlugin_v1 (a
 * loader must take v2); ENV_PLUGIN_V1_ONLY only v1; ENV_PLUGIN_INIT_FAILS
 * a v2 whose init returns ncclSystemError; ENV_PLUGIN_NO_TABLE neither. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { testSuccess = 0, testSystemError = 2 } testResult_t;
typedef void (*testLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
enum { kLogWarn = 2, kLogInfo = 3 };
enum { kFlagEnv = 0x80 };
#define UNUSED_IN_SOME_BUILDS __attribute__((unused))

#define MAX_VARS 64
static char names[MAX_VARS][128];
static char values[MAX_VARS][512];
static int hidden[MAX_VARS];
static int count;
static testLogger_t logger;

UNUSED_IN_SOME_BUILDS static void read_file(void) {
  const char* path = getenv("BRAID_TEST_ENV_FILE");
  FILE* f = path ? fopen(path, "r") : NULL;
  char line[700];
  count = 0;
  if (!f) return;
  while (count < MAX_VARS && fgets(line, sizeof(line), f)) {
    char* eq = strchr(line, '=');
    if (!eq || line[0] == '#') continue;
    line[strcspn(line, "\n")] = '\0';
    size_t name_bytes = (size_t)(eq - line), value_bytes = strlen(eq + 1);
    if (name_bytes >= sizeof(names[0]) || value_bytes >= sizeof(values[0])) continue;
    memcpy(names[count], line, name_bytes);
    names[count][name_bytes] = '\0';
    memcpy(values[count], eq + 1, value_bytes + 1);
    hidden[count] = value_bytes == 0;
    ++count;
  }
  fclose(f);
}

UNUSED_IN_SOME_BUILDS /* Each answer is written anew into the name's one buffer, which NCCL's
 * contract allows (a value holds until the next getEnv of that name): a
 * caller that let two threads ask at once would read a half-written one. */
static char served[MAX_VARS][512];

UNUSED_IN_SOME_BUILDS static const char* get_env(const char* name) {
  int i;
  size_t b;
  if (logger && strcmp(name, "BRAID_TEST_ENV_WARN") == 0)
    logger(kLogWarn, kFlagEnv, __FILE__, __LINE__, "braidtest env plugin asked for %s", name);
  for (i = 0; i < count; ++i) {
    if (strcmp(names[i], name) != 0) continue;
    if (hidden[i]) return NULL;
    for (b = 0; b + 1 < sizeof(served[i]); ++b) ((volatile char*)served[i])[b] = '#';
    for (b = 0; values[i][b]; ++b) ((volatile char*)served[i])[b] = values[i][b];
    served[i][b] = '\0';
    return served[i];
  }
  return getenv(name);
}

UNUSED_IN_SOME_BUILDS static testResult_t finalize(void) {
  const char* path = getenv("BRAID_TEST_ENV_FINALIZED");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (f) {
    fputs("finalized\n", f);
    fclose(f);
  }
  return testSuccess;
}

UNUSED_IN_SOME_BUILDS static testResult_t init_v1(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix) {
  (void)major, (void)minor, (void)patch, (void)suffix;
  read_file();
  return testSuccess;
}

UNUSED_IN_SOME_BUILDS static testResult_t init_v2(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix,
                                                  testLogger_t log) {
#ifdef ENV_PLUGIN_INIT_FAILS
  (void)major, (void)minor, (void)patch, (void)suffix, (void)log;
  return testSystemError;
#else
  read_file();
  logger = log;
  if (logger)
    logger(kLogInfo, kFlagEnv, __FILE__, __LINE__, "braidtest env plugin serving %d variables to NCCL %d.%d.%d%s",
           count, major, minor, patch, suffix ? suffix : "");
  return testSuccess;
#endif
}

typedef struct {
  const char* name;
  testResult_t (*init)(uint8_t, uint8_t, uint8_t, const char*);
  testResult_t (*finalize)(void);
  const char* (*getEnv)(const char*);
} testEnv_v1_t;

typedef struct {
  const char* name;
  testResult_t (*init)(uint8_t, uint8_t, uint8_t, const char*, testLogger_t);
  testResult_t (*finalize)(void);
  const char* (*getEnv)(const char*);
} testEnv_v2_t;

#ifndef ENV_PLUGIN_NO_TABLE
#ifndef ENV_PLUGIN_V1_ONLY
__attribute__((visibility("default"))) const testEnv_v2_t ncclEnvPlugin_v2 = {"braidtest-v2", init_v2, finalize,
                                                                             get_env};
#endif
__attribute__((visibility("default"))) const testEnv_v1_t ncclEnvPlugin_v1 = {"braidtest-v1", init_v1, finalize,
                                                                             get_env};
#else
__attribute__((visibility("default"))) int braidtest_env_plugin_without_table = 1;
#endif
