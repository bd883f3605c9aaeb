/* A shared library without kvscope's entry point. */
int not_a_policy(void) { return 0; }
