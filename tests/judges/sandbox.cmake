# The code-as-judge sandbox: hostile snippets, limits, the harness's result channel.
calleval_test(sandbox_test SOURCES sandbox_test.cc LIBS calleval_sandbox)

# The harness's Python files compile on their own (run.py's names come from lock_down.py at run
# time; a syntax error would otherwise show only as every code metric failing).
add_test(NAME sandbox_python_compiles
         COMMAND python3 -c "import sys; [compile(open(f).read(), f, 'exec') for f in sys.argv[1:]]"
                 ${CMAKE_SOURCE_DIR}/services/judges/sandbox_py/lock_down.py
                 ${CMAKE_SOURCE_DIR}/services/judges/sandbox_py/run.py
                 ${CMAKE_SOURCE_DIR}/services/judges/sandbox_py/validate.py)
