# The code-as-judge sandbox: hostile snippets, limits, the harness's result channel.
calleval_test(sandbox_test SOURCES sandbox_test.cc LIBS calleval_sandbox)
